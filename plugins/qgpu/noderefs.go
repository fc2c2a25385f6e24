package qgpu

import (
	"sync/atomic"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

// nodeRefs finds a node's ledger entry from the NodeInfo kube-scheduler
// passes to Filter, without the lookup by name, which costs a string hash, a
// compare and cache misses on every node of every cycle (on 5000 nodes, the
// largest part of Filter's time after the placement itself). A NodeInfo of
// kube-scheduler's snapshot belongs to one node for its life (the snapshot
// updates it in place, by name), and an entry keeps its NodeInfo reachable,
// so no other node's NodeInfo can take its address while it is cached.
//
// The table is open-addressed and its entries immutable: a lookup probes a
// few slots, and a miss looks the name up and claims a free slot with a
// compare-and-swap. The NodeInfos preemption clones fill slots that no cycle
// asks for again, so the table starts over when three quarters are taken.
type nodeRefs struct {
	taken atomic.Int32
	slots [nodeRefSlots]atomic.Pointer[nodeRef]
}

type nodeRef struct {
	ni  *framework.NodeInfo
	ref ledger.Ref
	// requested caches what the NodeInfo's pods request of
	// protocol.Resources, for the generation of the NodeInfo it was read at.
	requested atomic.Pointer[requested]
}

// requested is what a node's pods request of protocol.Resources, read from
// its NodeInfo at one generation. kube-scheduler gives a NodeInfo a new
// generation whenever it changes (a pod added or removed, the node updated),
// so an equal generation is the same requests, and Filter reads no map of
// the NodeInfo (long resource names compared in maps that hold every
// extended resource the node's pods ever asked for) on the nodes that did
// not change since the last cycle: nearly all of them.
type requested struct {
	generation int64
	sums       [len(protocol.Resources)]int64
}

// found is what the table answers for a NodeInfo: the node's ledger entry,
// and the table's entry for the NodeInfo (nil when the table does not hold
// it).
type found struct {
	ledger.Ref
	entry *nodeRef
}

// requested is what the pods on ni, the NodeInfo f was found for, request of
// protocol.Resources.
func (f found) requested(ni fwk.NodeInfo) [len(protocol.Resources)]int64 {
	if f.entry == nil {
		return requestedOf(ni)
	}
	gen := ni.GetGeneration()
	if r := f.entry.requested.Load(); r != nil && r.generation == gen {
		return r.sums
	}
	r := &requested{generation: gen, sums: requestedOf(ni)}
	f.entry.requested.Store(r)
	return r.sums
}

// requestedOf reads what the pods on ni request of protocol.Resources.
func requestedOf(ni fwk.NodeInfo) (sums [len(protocol.Resources)]int64) {
	m := ni.GetRequested().GetScalarResources()
	for i, name := range protocol.Resources {
		sums[i] = m[v1.ResourceName(name)]
	}
	return sums
}

const (
	nodeRefBits   = 14
	nodeRefSlots  = 1 << nodeRefBits
	nodeRefProbes = 8
)

// get finds the ledger's entry for the node of ni, named name.
func (c *nodeRefs) get(l *ledger.Ledger, ni fwk.NodeInfo, name string) found {
	key, ok := ni.(*framework.NodeInfo)
	if !ok {
		return found{Ref: l.Ref(name)}
	}
	h := slotOf(key)
	for i := range nodeRefProbes {
		e := c.slots[(h+i)%nodeRefSlots].Load()
		if e == nil {
			break
		}
		if e.ni == key {
			return found{e.ref, e}
		}
	}
	ref := l.Ref(name)
	if !ref.Known() {
		return found{Ref: ref}
	}
	e := &nodeRef{ni: key, ref: ref}
	return found{ref, c.add(e, h)}
}

// add claims the first free slot of e's probe sequence and returns the
// table's entry for e's NodeInfo: e, or the one another goroutine added
// first; nil when all slots are taken and e stays uncached.
func (c *nodeRefs) add(e *nodeRef, h int) *nodeRef {
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
func (c *nodeRefs) reset() {
	for i := range c.slots {
		c.slots[i].Store(nil)
	}
	c.taken.Store(0)
}

// slotOf is the first slot of a NodeInfo's probe sequence, from its address
// (used as a number only).
func slotOf(key *framework.NodeInfo) int {
	a := uint64(uintptr(unsafe.Pointer(key)))
	return int((a >> 4) * 0x9E3779B97F4A7C15 >> (64 - nodeRefBits))
}
