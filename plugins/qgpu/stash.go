package qgpu

import (
	"math/bits"
	"sync/atomic"
	"unsafe"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// scoreStash carries the score Filter computes for a node, while it holds a
// copy of the node's cards anyway, to Score in the same scheduling cycle:
// Score then neither looks the node up in the ledger again nor copies its
// cards (on 5000 nodes that lookup and copy were most of Score's time, make
// bench-throughput SIZE=large). kube-scheduler runs one scheduling cycle at a
// time and each profile has its own plugin, so PreFilter empties the stash
// for the cycle. It is a small open-addressed table keyed by the NodeInfo's
// address, sized for the nodes a cycle scores: Score reads one slot, most
// often in a cache line Filter wrote a moment ago, instead of the node's
// entries elsewhere in memory. Filter runs on many goroutines and claims a
// slot with a compare-and-swap; a node that finds no free slot is not
// stashed, and Score computes its score.
type scoreStash struct {
	slots atomic.Pointer[[]stashSlot]
}

type stashSlot struct {
	ni    atomic.Pointer[framework.NodeInfo]
	score atomic.Int64
}

const stashProbes = 8

// reset empties the stash for a cycle over nodes nodes: four slots for each
// node kube-scheduler looks for (feasibleToFind), a power of two, at least 64.
// It runs before the cycle's Filter calls, which kube-scheduler starts after
// PreFilter returned; its atomic stores only keep the race detector's
// concurrent tests, which run cycles side by side, quiet.
func (st *scoreStash) reset(nodes int) {
	size := max(64, 1<<bits.Len(uint(4*feasibleToFind(nodes))))
	slots := st.slots.Load()
	if slots == nil || len(*slots) != size {
		fresh := make([]stashSlot, size)
		st.slots.Store(&fresh)
		return
	}
	for i := range *slots {
		(*slots)[i].ni.Store(nil)
	}
}

// put records the node's score for this cycle.
func (st *scoreStash) put(ni fwk.NodeInfo, score int64) {
	key, ok := ni.(*framework.NodeInfo)
	slots := st.slots.Load()
	if !ok || slots == nil {
		return
	}
	h, mask := st.hash(key), len(*slots)-1
	for i := range stashProbes {
		slot := &(*slots)[(h+i)&mask]
		if slot.ni.CompareAndSwap(nil, key) || slot.ni.Load() == key {
			slot.score.Store(score)
			return
		}
	}
}

// get is the score Filter stashed for the node in this cycle.
func (st *scoreStash) get(ni fwk.NodeInfo) (int64, bool) {
	key, ok := ni.(*framework.NodeInfo)
	slots := st.slots.Load()
	if !ok || slots == nil {
		return 0, false
	}
	h, mask := st.hash(key), len(*slots)-1
	for i := range stashProbes {
		slot := &(*slots)[(h+i)&mask]
		switch slot.ni.Load() {
		case key:
			return slot.score.Load(), true
		case nil:
			return 0, false
		}
	}
	return 0, false
}

// hash is the first slot of a NodeInfo's probe sequence, from its address
// (used as a number only).
func (st *scoreStash) hash(key *framework.NodeInfo) int {
	a := uint64(uintptr(unsafe.Pointer(key)))
	return int((a >> 4) * 0x9E3779B97F4A7C15 >> 32)
}
