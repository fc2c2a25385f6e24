package qgpu

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Reason of node-exclusive placement (docs/node-exclusive.md).
const (
	// ReasonNodeNotEmpty: a node-exclusive pod needs a node where no pod
	// asks for GPU and no card is held. Removing pods can cure it.
	ReasonNodeNotEmpty = "node has pods that ask for GPU (a node-exclusive pod takes every card)"
)

// errNoContainer is a node-exclusive request without a container to hand
// the cards to: the request parser never makes one.
var errNoContainer = errors.New("node-exclusive request names no container")

// filterExclusive admits a node-exclusive pod to a node only where every
// card is healthy and empty and no pod on the node asks for GPU (bound or
// assumed, qGPU or another vocabulary, with or without an assignment yet).
// Whatever arrives later finds the cards full: the pod's holding is every
// card whole.
func (p *QGPU) filterExclusive(s *cycleState, nodeInfo fwk.NodeInfo) *fwk.Status {
	var buf [cardBuf]ledger.Card
	n := p.nodeCards(s, nodeInfo.Node().Name, buf[:0])
	reason := invalidReason(n.Invalid)
	if reason == "" {
		_, reason = exclusiveSlices(n.Cards)
	}
	if reason == "" && nodeHasGPUPods(nodeInfo) {
		reason = ReasonNodeNotEmpty
	}
	if reason != "" {
		p.rejections.rejected(pointFilter, reason)
		return fwk.NewStatus(unschedulableCode(reason), reason)
	}
	return nil
}

// exclusiveSlices is every card of the node, whole: all its memory and
// 100 cores. It fails with a constant reason when the node has no cards or
// a card is unhealthy or held.
func exclusiveSlices(cards []ledger.Card) ([]protocol.Slice, string) {
	if len(cards) == 0 {
		return nil, placement.ReasonNoCards
	}
	out := make([]protocol.Slice, 0, len(cards))
	for i := range cards {
		c := &cards[i]
		if !c.Empty() {
			return nil, ReasonNodeNotEmpty
		}
		if !c.Healthy || c.MemoryGiB < 1 {
			return nil, placement.ReasonCardsFull
		}
		out = append(out, protocol.Slice{Index: c.Index, UUID: c.UUID, MemoryGiB: c.MemoryGiB, Cores: protocol.CoresPerCard})
	}
	return out, ""
}

// exclusiveAssignment hands every card of the node to the pod's first
// qGPU container (the one that asked for the node).
func exclusiveAssignment(cards []ledger.Card, req *request.Request) ([]protocol.ContainerAssignment, error) {
	if len(req.Containers) == 0 {
		return nil, errNoContainer
	}
	slices, reason := exclusiveSlices(cards)
	if reason != "" {
		return nil, fmt.Errorf("%s", reason)
	}
	return []protocol.ContainerAssignment{{Name: req.Containers[0].Name, Slices: slices}}, nil
}

// nodeHasGPUPods reports whether a pod on the node (bound or assumed) asks
// for a qGPU resource or for whole cards.
func nodeHasGPUPods(nodeInfo fwk.NodeInfo) bool {
	for _, pi := range nodeInfo.GetPods() {
		if asksGPU(pi.GetPod()) {
			return true
		}
	}
	return false
}

// asksGPU reports whether the pod asks for a qGPU resource or for
// nvidia.com/gpu in any container.
func asksGPU(pod *v1.Pod) bool {
	if request.Asks(pod) {
		return true
	}
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			r := cs[i].Resources
			_, inLimits := r.Limits[request.ResourceWholeGPU]
			_, inRequests := r.Requests[request.ResourceWholeGPU]
			if inLimits || inRequests {
				return true
			}
		}
	}
	return false
}
