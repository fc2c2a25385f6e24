package fastpath

import (
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

// Taking NodeResourcesFit's check over.
//
// NodeResourcesFit checks each extended resource a pod asks for on each node
// it filters, and pays a regexp per resource name per node for it
// (IsExtendedResourceName): for a qGPU pod, two long names, most of the
// Filter time of a cycle on a large cluster (make bench-throughput
// SIZE=large). QGPU takes that check of its own resources over: PreFilter
// moves them out of NodeResourcesFit's PreFilter state into its own
// (TakeOverFit), and Filter compares them with the node's allocatable less
// what is requested there, as NodeResourcesFit does, with its reasons
// (FitRequest.check). The allocatable counts come from the ledger, which
// keeps them from the same Node objects, under the lock Filter takes anyway.
// The check stays: a node whose agent's device plugins are gone has none of
// them allocatable, whatever its cards' inventory says.
//
// NodeResourcesFit's PreFilter must run first, as it does in the shipped
// profiles (QGPU is enabled after the default plugins). Otherwise its state
// is not there yet, nothing moves, and NodeResourcesFit checks as before.

// insufficient are NodeResourcesFit's reasons for protocol.Resources,
// constant so that Filter does not allocate them.
var insufficient = func() (r [len(protocol.Resources)]string) {
	for i, name := range protocol.Resources {
		r[i] = "Insufficient " + name
	}
	return r
}()

// InsufficientReasons are the reasons FitRequest.Check gives, for the
// plugin's metrics (a copy).
func InsufficientReasons() []string { return append([]string(nil), insufficient[:]...) }

// fitStateKey is where NodeResourcesFit's PreFilter keeps the pod's requests.
const fitStateKey fwk.StateKey = "PreFilter" + names.NodeResourcesFit

// scalarRequests is the part of NodeResourcesFit's (unexported) PreFilter
// state that QGPU edits: its embedded framework.Resource's map.
type scalarRequests interface {
	GetScalarResources() map[v1.ResourceName]int64
}

// FitRequest is the pod's request of each of protocol.Resources, as
// NodeResourcesFit computed it (init containers and pod overhead included).
type FitRequest [len(protocol.Resources)]int64

// TakeOverFit moves the qGPU resources out of NodeResourcesFit's state. It
// returns false, moving nothing, when that state is not there.
func TakeOverFit(cs fwk.CycleState) (FitRequest, bool) {
	var r FitRequest
	d, err := cs.Read(fitStateKey)
	if err != nil {
		return r, false
	}
	s, ok := d.(scalarRequests)
	if !ok || s.GetScalarResources() == nil {
		return r, false
	}
	m := s.GetScalarResources()
	for i, name := range protocol.Resources {
		r[i] = m[v1.ResourceName(name)]
		delete(m, v1.ResourceName(name))
	}
	// No node lists these (docs/vocabularies.md#what-the-agent-advertises):
	// the ledger accounts them.
	for _, name := range vocab.Unadvertised() {
		delete(m, v1.ResourceName(name))
	}
	return r, true
}

// Check is NodeResourcesFit's check of the qGPU resources on one node, with
// alloc the node's allocatable (ledger.Node.Allocatable) and used what its
// pods request (Found.Requested): the reason of the first one short, and
// whether removing pods cannot help (the node has less than the pod asks for
// at all); "" when all fit.
func (r *FitRequest) Check(used, alloc [len(protocol.Resources)]int64) (reason string, unresolvable bool) {
	for i, q := range r {
		if q > 0 && q > alloc[i]-used[i] {
			return insufficient[i], q > alloc[i]
		}
	}
	return "", false
}

// Requested is what the pods on ni, the NodeInfo f was found for, request of
// protocol.Resources. The table's entry keeps it for the generation of the
// NodeInfo it was read at. kube-scheduler gives a NodeInfo a new generation
// whenever it changes (a pod added or removed, the node updated), so an equal
// generation is the same requests, and Filter reads no map of the NodeInfo
// (long resource names compared in maps that hold every extended resource
// the node's pods ever asked for) on the nodes that did not change since the
// last cycle: nearly all of them. The generation brackets the sums like a
// sequence lock, so a read that overlaps a write is not taken.
func (f Found) Requested(ni fwk.NodeInfo) [len(protocol.Resources)]int64 {
	e := f.entry
	if e == nil {
		return requestedOf(ni)
	}
	gen := ni.GetGeneration()
	var sums [len(protocol.Resources)]int64
	if e.generation.Load() == gen {
		for i := range sums {
			sums[i] = e.requested[i].Load()
		}
		if e.generation.Load() == gen {
			return sums
		}
	}
	sums = requestedOf(ni)
	e.generation.Store(0)
	for i, v := range sums {
		e.requested[i].Store(v)
	}
	e.generation.Store(gen)
	return sums
}

// requestedOf reads what the pods on ni request of protocol.Resources.
func requestedOf(ni fwk.NodeInfo) (sums [len(protocol.Resources)]int64) {
	m := ni.GetRequested().GetScalarResources()
	for i, name := range protocol.Resources {
		sums[i] = m[v1.ResourceName(name)]
	}
	return sums
}
