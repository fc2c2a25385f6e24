package qgpu

import (
	"sync"
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// Scores put from many goroutines read back as put; when more nodes pass
// Filter than the stash has room for, the ones left out read as not stashed
// (Score computes theirs), never as another node's; reset forgets them all.
func TestScoreStash(t *testing.T) {
	_, nis := namedNodes(3000)
	var st scoreStash
	st.reset(len(nis)) // feasibleToFind(3000) = 780: 4096 slots, room for far more
	size := len(st.table.Load().slots)
	if size < 4*feasibleToFind(len(nis)) {
		t.Fatalf("%d slots for %d nodes to find", size, feasibleToFind(len(nis)))
	}
	// The nodes a cycle looks for (780) nearly all find room: the table
	// is sized four times that. More nodes than that (all 3000, a load
	// factor of 0.73) still read only their own score, and most find
	// room; how many depends on the NodeInfos' addresses (the hash's
	// key), so only a loose bound is asserted there.
	for _, c := range []struct {
		nodes int
		min   float64
	}{{feasibleToFind(len(nis)), 0.99}, {len(nis), 0.5}} {
		st.reset(len(nis))
		some := nis[:c.nodes]
		putConcurrently(&st, some, func(i int) int64 { return int64(i) })
		stashed := 0
		for i, ni := range some {
			score, ok := st.get(ni)
			if ok && score != int64(i) {
				t.Fatalf("%d nodes: node %d reads score %d", c.nodes, i, score)
			}
			if ok {
				stashed++
			}
		}
		if float64(stashed) < c.min*float64(c.nodes) {
			t.Errorf("%d of %d nodes stashed in %d slots, want at least %.0f%%", stashed, c.nodes, size, 100*c.min)
		}
	}
	st.reset(len(nis))
	for i, ni := range nis {
		if score, ok := st.get(ni); ok {
			t.Fatalf("node %d reads score %d after reset", i, score)
		}
	}
	var empty scoreStash
	empty.put(nis[0], 1)
	if _, ok := empty.get(nis[0]); ok {
		t.Error("a stash never reset holds a score")
	}
}

// Over many cycles of more nodes than slots, put from goroutines that
// contend for the same slots, a node reads its own score of this cycle or
// none: never another node's, never an older cycle's. Run with -race.
func TestScoreStashContended(t *testing.T) {
	_, nis := namedNodes(200)
	var st scoreStash
	for cycle := range 30 {
		st.reset(0) // 64 slots
		putConcurrently(&st, nis, func(i int) int64 { return int64(i*1000 + cycle) })
		stashed := 0
		for i, ni := range nis {
			if score, ok := st.get(ni); ok {
				stashed++
				if score != int64(i*1000+cycle) {
					t.Fatalf("cycle %d: node %d reads score %d, want %d", cycle, i, score, i*1000+cycle)
				}
			}
		}
		if stashed == 0 || stashed > 64 {
			t.Fatalf("cycle %d: %d nodes stashed in 64 slots", cycle, stashed)
		}
	}
}

// putConcurrently puts score(i) for nis[i] from 4 goroutines, as Filter's
// parallel calls do.
func putConcurrently(st *scoreStash, nis []*framework.NodeInfo, score func(i int) int64) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(nis); i += 4 {
				st.put(nis[i], score(i))
			}
		}()
	}
	wg.Wait()
}
