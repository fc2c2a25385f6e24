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
	putConcurrently(&st, nis, func(i int) int64 { return int64(i) })
	stashed := 0
	for i, ni := range nis {
		score, ok := st.get(ni)
		if ok && score != int64(i) {
			t.Fatalf("node %d reads score %d", i, score)
		}
		if ok {
			stashed++
		}
	}
	// 3000 nodes in 4096 slots with 8 probes: nearly all find room.
	if stashed < len(nis)*9/10 {
		t.Errorf("%d of %d nodes stashed", stashed, len(nis))
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
