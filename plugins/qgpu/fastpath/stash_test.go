package fastpath

import (
	"sync"
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// Scores put from many goroutines read back as put; when every node of the
// cluster passes Filter (the shipped profiles filter and score every node)
// nearly all of them are stashed; when more nodes pass than the stash has
// room for, the ones left out read as not stashed (Score computes theirs),
// never as another node's; Reset forgets them all.
func TestScoreStash(t *testing.T) {
	_, nis := namedNodes(5000)
	var st Stash
	for _, c := range []struct {
		sizedFor, nodes int
		min             float64
	}{
		// 5000 nodes in 32768 slots.
		{len(nis), len(nis), 0.99},
		// Sized for 1000 (4096 slots), 5000 put: a load factor above 1.
		// How many find room depends on the NodeInfos' addresses (the
		// hash's key), so only a loose bound is asserted.
		{1000, len(nis), 0.5},
	} {
		st.Reset(c.sizedFor)
		size := len(st.table.Load().slots)
		if size < 4*c.sizedFor {
			t.Fatalf("%d slots for %d nodes", size, c.sizedFor)
		}
		some := nis[:c.nodes]
		putConcurrently(&st, some, func(i int) int64 { return int64(i) })
		stashed := 0
		for i, ni := range some {
			score, ok := st.Get(ni)
			if ok && score != int64(i) {
				t.Fatalf("%d nodes: node %d reads score %d", c.nodes, i, score)
			}
			if ok {
				stashed++
			}
		}
		if float64(stashed) < c.min*float64(min(c.nodes, size)) {
			t.Errorf("%d of %d nodes stashed in %d slots, want at least %.0f%%", stashed, c.nodes, size, 100*c.min)
		}
	}
	st.Reset(len(nis))
	for i, ni := range nis {
		if score, ok := st.Get(ni); ok {
			t.Fatalf("node %d reads score %d after reset", i, score)
		}
	}
	var empty Stash
	empty.Put(nis[0], 1)
	if _, ok := empty.Get(nis[0]); ok {
		t.Error("a stash never reset holds a score")
	}
}

// Over many cycles of more nodes than slots, put from goroutines that
// contend for the same slots, a node reads its own score of this cycle or
// none: never another node's, never an older cycle's. Run with -race.
func TestScoreStashContended(t *testing.T) {
	_, nis := namedNodes(200)
	var st Stash
	for cycle := range 30 {
		st.Reset(0) // 64 slots
		putConcurrently(&st, nis, func(i int) int64 { return int64(i*1000 + cycle) })
		stashed := 0
		for i, ni := range nis {
			if score, ok := st.Get(ni); ok {
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
func putConcurrently(st *Stash, nis []*framework.NodeInfo, score func(i int) int64) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(nis); i += 4 {
				st.Put(nis[i], score(i))
			}
		}()
	}
	wg.Wait()
}
