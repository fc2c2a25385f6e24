package fastpath

import (
	"sync/atomic"
	"unsafe"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

// Refs finds a node's ledger entry from the NodeInfo kube-scheduler
// passes to Filter, without the lookup by name, which costs a string hash, a
// compare and cache misses on every node of every cycle (on 5000 nodes, the
// largest part of Filter's time after the placement itself). A NodeInfo of
// kube-scheduler's snapshot belongs to one node for its life (the snapshot
// updates it in place, by name), and an entry keeps its NodeInfo reachable,
// so no other node's NodeInfo can take its address while it is cached.
//
// An entry also carries what the node's pods request, for the next cycles
// while the NodeInfo does not change (Found.Requested).
//
// The table is open-addressed: a lookup probes a few slots, and a miss looks
// the name up and claims a free slot with a compare-and-swap. The NodeInfos
// preemption clones fill slots that no cycle asks for again, so the table
// starts over when three quarters are taken.
type Refs struct {
	taken atomic.Int32
	slots [nodeRefSlots]atomic.Pointer[nodeRef]
}

// nodeRef is one NodeInfo's entry: one cache line (64 bytes, a size class
// the allocator aligns to 64), written only when the NodeInfo changes, so
// Filter's lookups on any core find it shared.
type nodeRef struct {
	ni  *framework.NodeInfo
	ref ledger.Ref
	// generation is the NodeInfo's generation that requested was read at
	// (0 while it is written).
	generation atomic.Int64
	requested  [len(protocol.Resources)]atomic.Int64
	_          [64 - 48]byte
}

const (
	nodeRefBits   = 14
	nodeRefSlots  = 1 << nodeRefBits
	nodeRefProbes = 8
)

// Found is what the table answers for a NodeInfo: the node's ledger entry,
// and the table's entry for the NodeInfo (nil when the table does not hold
// it).
type Found struct {
	ledger.Ref
	entry *nodeRef
}

// Get finds the ledger's entry for the node of ni, named name, and adds it
// to the table.
func (c *Refs) Get(l *ledger.Ledger, ni fwk.NodeInfo, name string) Found {
	key, ok := ni.(*framework.NodeInfo)
	if !ok {
		return Found{Ref: l.Ref(name)}
	}
	if e := c.lookup(key); e != nil {
		return Found{e.ref, e}
	}
	ref := l.Ref(name)
	if !ref.Known() {
		return Found{Ref: ref}
	}
	return Found{ref, c.add(&nodeRef{ni: key, ref: ref}, addressHash(key, nodeRefBits))}
}

// lookup is the table's entry for a NodeInfo, or nil.
func (c *Refs) lookup(key *framework.NodeInfo) *nodeRef {
	h := addressHash(key, nodeRefBits)
	for i := range nodeRefProbes {
		e := c.slots[(h+i)%nodeRefSlots].Load()
		if e == nil {
			return nil
		}
		if e.ni == key {
			return e
		}
	}
	return nil
}

// add claims the first free slot of e's probe sequence and returns the
// table's entry for e's NodeInfo: e, or the one another goroutine added
// first; nil when all slots are taken and e stays uncached.
func (c *Refs) add(e *nodeRef, h int) *nodeRef {
	if c.taken.Load() >= nodeRefSlots/4*3 {
		c.reset()
	}
	for i := range nodeRefProbes {
		slot := &c.slots[(h+i)%nodeRefSlots]
		if slot.CompareAndSwap(nil, e) {
			c.taken.Add(1)
			return e
		}
		if other := slot.Load(); other != nil && other.ni == e.ni {
			return other
		}
	}
	return nil
}

// reset empties the table. Lookups meanwhile miss and look the name up.
func (c *Refs) reset() {
	for i := range c.slots {
		c.slots[i].Store(nil)
	}
	c.taken.Store(0)
}

// addressHash is the first slot of a NodeInfo's probe sequence in a table of
// 1<<bits slots, from its address (used as a number only): the top bits of a
// multiplicative (Fibonacci) hash. Refs and Stash both use it.
func addressHash(key *framework.NodeInfo, bits int) int {
	a := uint64(uintptr(unsafe.Pointer(key)))
	return int((a >> 4) * 0x9E3779B97F4A7C15 >> (64 - bits))
}
