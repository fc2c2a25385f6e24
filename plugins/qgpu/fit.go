package qgpu

import (
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// NodeResourcesFit checks each extended resource a pod asks for on each node
// it filters, and pays a regexp per resource name per node for it
// (IsExtendedResourceName): for a qGPU pod, two long names, most of the
// Filter time of a cycle on a large cluster (make bench-throughput
// SIZE=large). QGPU takes that check of its own resources over: PreFilter
// moves them out of NodeResourcesFit's PreFilter state into its own
// (takeOverFit), and Filter compares them with the node's allocatable less
// what is requested there, as NodeResourcesFit does, with its reasons
// (fitRequest.check). The allocatable counts come from the ledger, which
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

// fitStateKey is where NodeResourcesFit's PreFilter keeps the pod's requests.
const fitStateKey fwk.StateKey = "PreFilter" + names.NodeResourcesFit

// scalarRequests is the part of NodeResourcesFit's (unexported) PreFilter
// state that QGPU edits: its embedded framework.Resource's map.
type scalarRequests interface {
	GetScalarResources() map[v1.ResourceName]int64
}

// fitRequest is the pod's request of each of protocol.Resources, as
// NodeResourcesFit computed it (init containers and pod overhead included).
type fitRequest [len(protocol.Resources)]int64

// takeOverFit moves the qGPU resources out of NodeResourcesFit's state. It
// returns false, moving nothing, when that state is not there.
func takeOverFit(cs fwk.CycleState) (fitRequest, bool) {
	var r fitRequest
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
	return r, true
}

// check is NodeResourcesFit's check of the qGPU resources on one node, with
// alloc the node's allocatable (ledger.Node.Allocatable) and used what its
// pods request (found.requested): the reason of the first one short, and
// whether removing pods cannot help (the node has less than the pod asks for
// at all); "" when all fit.
func (r *fitRequest) check(used, alloc [len(protocol.Resources)]int64) (reason string, unresolvable bool) {
	for i, q := range r {
		if q > 0 && q > alloc[i]-used[i] {
			return insufficient[i], q > alloc[i]
		}
	}
	return "", false
}
