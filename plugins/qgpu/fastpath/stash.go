package fastpath

import (
	"math/bits"
	"sync/atomic"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// Stash carries the score Filter computes for a node, while it holds a copy
// of the node's cards anyway, to Score in the same scheduling cycle: Score
// then neither looks the node up in the ledger again nor copies its cards
// (on 5000 nodes that lookup and copy were most of Score's time, make
// bench-throughput SIZE=large). It is a small open-addressed table keyed by
// the NodeInfo's address, with four slots for every node of the cluster:
// Score reads one slot, most often in a cache line Filter wrote a moment
// ago, instead of the node's entries elsewhere in memory. Filter runs on
// many goroutines and claims a slot with a compare-and-swap; a node that
// finds no free slot is not stashed, and Score computes its score.
// kube-scheduler runs one scheduling cycle at a time and each profile has
// its own plugin; PreFilter starts a cycle (Reset), and a slot counts only in
// the cycle it was written in, so nothing is cleared between cycles.
type Stash struct {
	table atomic.Pointer[stashTable]
}

type stashTable struct {
	cycle atomic.Uint64
	// slots has 1<<bits slots.
	bits  int
	slots []stashSlot
}

type stashSlot struct {
	ni    atomic.Pointer[framework.NodeInfo]
	cycle atomic.Uint64
	score atomic.Int64
}

const (
	stashProbes = 8
	// claimed marks a slot's cycle while a Filter call writes the slot.
	claimed = 1 << 63
)

// Reset starts a cycle over nodes nodes: four slots for each node, a power
// of two, at least 64. The table is sized for every node, not for the nodes
// kube-scheduler's adaptive percentageOfNodesToScore looks for: the shipped
// profiles set it to 100, so every feasible node is filtered and scored,
// and sized for the adaptive share (a fifth of the nodes at 5000) most of
// them found no slot and were placed and scored a second time in Score.
func (st *Stash) Reset(nodes int) {
	n := max(6, bits.Len(uint(4*nodes)))
	if t := st.table.Load(); t != nil && t.bits == n {
		t.cycle.Add(1)
		return
	}
	t := &stashTable{bits: n, slots: make([]stashSlot, 1<<n)}
	t.cycle.Store(1)
	st.table.Store(t)
}

// Put records the node's score for this cycle, in the first slot of its
// probe sequence not written in this cycle. A slot is claimed for the node by
// a compare-and-swap of its cycle to claimed, written, and then marked with
// the cycle: no two nodes ever share a slot's cycle.
func (st *Stash) Put(ni fwk.NodeInfo, score int64) {
	key, ok := ni.(*framework.NodeInfo)
	t := st.table.Load()
	if !ok || t == nil {
		return
	}
	cycle := t.cycle.Load()
	h, mask := addressHash(key, t.bits), len(t.slots)-1
	for i := range stashProbes {
		slot := &t.slots[(h+i)&mask]
		c := slot.cycle.Load()
		if c == cycle && slot.ni.Load() == key {
			// Filter ran twice on the node in one cycle (kube-scheduler
			// does not): the same pod on the same node, the same score.
			slot.score.Store(score)
			return
		}
		if c == cycle || c == claimed || !slot.cycle.CompareAndSwap(c, claimed) {
			continue
		}
		slot.ni.Store(key)
		slot.score.Store(score)
		slot.cycle.Store(cycle)
		return
	}
}

// Get is the score Filter stashed for the node in this cycle.
func (st *Stash) Get(ni fwk.NodeInfo) (int64, bool) {
	key, ok := ni.(*framework.NodeInfo)
	t := st.table.Load()
	if !ok || t == nil {
		return 0, false
	}
	cycle := t.cycle.Load()
	h, mask := addressHash(key, t.bits), len(t.slots)-1
	for i := range stashProbes {
		slot := &t.slots[(h+i)&mask]
		switch c := slot.cycle.Load(); {
		case c == cycle:
			if slot.ni.Load() == key {
				return slot.score.Load(), true
			}
		case c != claimed:
			return 0, false // put would have taken this slot
		}
	}
	return 0, false
}
