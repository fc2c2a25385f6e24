package qgpu

import (
	"sync/atomic"
	"unsafe"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

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
}

const (
	nodeRefBits   = 14
	nodeRefSlots  = 1 << nodeRefBits
	nodeRefProbes = 8
)

// get is the ledger's entry for the node of ni, named name.
func (c *nodeRefs) get(l *ledger.Ledger, ni fwk.NodeInfo, name string) ledger.Ref {
	key, ok := ni.(*framework.NodeInfo)
	if !ok {
		return l.Ref(name)
	}
	h := slotOf(key)
	for i := range nodeRefProbes {
		e := c.slots[(h+i)%nodeRefSlots].Load()
		if e == nil {
			break
		}
		if e.ni == key {
			return e.ref
		}
	}
	ref := l.Ref(name)
	if ref.Known() {
		c.add(&nodeRef{ni: key, ref: ref}, h)
	}
	return ref
}

// add claims the first free slot of e's probe sequence; when they are all
// taken, e stays uncached.
func (c *nodeRefs) add(e *nodeRef, h int) {
	if c.taken.Load() >= nodeRefSlots/4*3 {
		c.reset()
	}
	for i := range nodeRefProbes {
		slot := &c.slots[(h+i)%nodeRefSlots]
		if slot.CompareAndSwap(nil, e) {
			c.taken.Add(1)
			return
		}
		if other := slot.Load(); other != nil && other.ni == e.ni {
			return
		}
	}
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
