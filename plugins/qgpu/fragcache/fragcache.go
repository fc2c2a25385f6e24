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
//   - Each node has its own entry, found by its name in an open-addressed
//     table (a hash of the name, then up to probes slots on, each entry
//     holding its node's name). A node whose probes are all taken by other
//     names replaces the entry in its first slot; the node evicted gets a
//     new entry on its next lookup. Entries are never removed otherwise, so
//     names of nodes long gone only take room. Evicting costs a measure,
//     never an answer: what an entry answers never depends on whose it is.
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

// slots is the number of entries, probes how many a lookup tries. At 5000
// nodes a sixth of the table is taken, so a lookup ends at the first or
// second slot. (The table once held 1<<13 entries, one per hash with no
// probing: at 5000 nodes 44 % of the nodes shared an entry with another and
// were measured again in every cycle, make bench-throughput SIZE=large.)
const (
	slots  = 1 << 15
	probes = 16
)

// Cache is the nodes' entries; the zero value is ready.
type Cache struct {
	entries [slots]atomic.Pointer[Entry]
}

// Entry is one node's remembered fragmentation.
type Entry struct {
	// name is the node's, set when the entry is made.
	name     string
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
	home := placement.NameHash(name)
	for i := range uint32(probes) {
		slot := &c.entries[(home+i)%slots]
		e := slot.Load()
		if e == nil && slot.CompareAndSwap(nil, &Entry{name: name}) {
			return slot.Load()
		}
		if e == nil {
			e = slot.Load() // another goroutine took the slot first
		}
		if e.name == name {
			return e
		}
	}
	e := &Entry{name: name}
	c.entries[home%slots].Store(e)
	return e
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
