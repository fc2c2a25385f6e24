// Package fragcache remembers each node's fragmentation (placement.Frag)
// from one scheduling cycle to the next. The fragmentation-aware policies
// score a node by how much the pod changes its fragmentation, so Filter
// measures every node it evaluates twice, before and after the pod; the
// measure before the pod depends on the node only, and most nodes do not
// change between two cycles.
//
// Invariants:
//
//   - An entry holds placement.Frag of exactly the inputs it stores: every
//     field of the node's cards, its CPU left, whether its CPU is known,
//     and the workload. A *placement.Workload is never changed once built
//     (the learner publishes a new one), so its pointer stands for its
//     content.
//   - A lookup answers from the entry only when all of these equal the
//     query's; otherwise it measures and overwrites the entry. Nothing else
//     invalidates an entry: a node whose pods, cards or CPU changed, or a
//     new workload, misses once.
//   - Entries are found by a hash of the node's name. Two nodes that share
//     an entry only evict each other: what an entry answers never depends
//     on whose it is.
//   - Each entry has its own lock; kube-scheduler filters a node once per
//     cycle, so it is not contended. An entry allocates only when it first
//     holds a node with more cards than before.
package fragcache

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

// slots is the number of entries: more than the nodes of the largest
// cluster measured (5000), so that few nodes share one.
const slots = 1 << 13

// Cache is the nodes' entries; the zero value is ready.
type Cache struct {
	entries [slots]atomic.Pointer[Entry]
}

// Entry is one node's remembered fragmentation.
type Entry struct {
	mu       sync.Mutex
	valid    bool
	cards    []ledger.Card
	cpuLeft  int64
	cpuKnown bool
	work     *placement.Workload
	frag     float64
}

// For is the entry of the node named name, created on first use.
func (c *Cache) For(name string) *Entry {
	slot := &c.entries[placement.NameHash(name)%slots]
	if e := slot.Load(); e != nil {
		return e
	}
	slot.CompareAndSwap(nil, &Entry{})
	return slot.Load()
}

// Frag is placement.Frag(cards, cpuLeft, cpuKnown, w), from the entry when
// it holds these very inputs.
func (e *Entry) Frag(cards []ledger.Card, cpuLeft int64, cpuKnown bool, w *placement.Workload) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.valid && e.work == w && e.cpuLeft == cpuLeft && e.cpuKnown == cpuKnown && slices.Equal(e.cards, cards) {
		return e.frag
	}
	e.frag = placement.Frag(cards, cpuLeft, cpuKnown, w)
	e.cards = append(e.cards[:0], cards...)
	e.cpuLeft, e.cpuKnown, e.work, e.valid = cpuLeft, cpuKnown, w, true
	return e.frag
}
