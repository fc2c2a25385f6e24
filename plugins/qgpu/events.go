package qgpu

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// EventsToRegister: a qGPU pod leaving a node (deleted or finished) frees
// slices, or at least the qGPU resources it requested there; a node gaining
// or changing its qGPU inventory, labels or allocatable qGPU resources (its
// agent's device plugins registering again) may add room.
func (p *QGPU) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: p.isSchedulableAfterPodDeleted},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeAnnotation | fwk.UpdateNodeAllocatable},
			QueueingHintFn: p.isSchedulableAfterNodeChange},
	}, nil
}

func (p *QGPU) isSchedulableAfterPodDeleted(logger klog.Logger, pod *v1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	gone, ok := tombstone[*v1.Pod](oldObj)
	if !ok {
		return fwk.Queue, nil
	}
	if gone.Spec.NodeName == "" {
		logger.V(5).Info("pod deleted before binding holds no slices", "pod", klog.KObj(pod), "deleted", klog.KObj(gone))
		return fwk.QueueSkip, nil
	}
	if _, assigned := gone.Annotations[protocol.AnnotationAssignment]; !assigned && !request.Asks(gone) {
		logger.V(5).Info("deleted pod held no qGPU resources", "pod", klog.KObj(pod), "deleted", klog.KObj(gone))
		return fwk.QueueSkip, nil
	}
	// The informer calls the queue's handler and the ledger's handler in
	// no set order: free the slices here, before the pod is retried, or the
	// retry can still see them held and the pod waits for the next event
	// (up to five minutes). Release is idempotent.
	p.ledger.Release(gone.UID, "")
	return fwk.Queue, nil
}

func (p *QGPU) isSchedulableAfterNodeChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	node, ok := newObj.(*v1.Node)
	if !ok {
		return fwk.Queue, nil
	}
	if node.Labels[protocol.LabelDeviceEnable] != protocol.LabelValueEnable {
		logger.V(5).Info("node is not a qGPU node", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.QueueSkip, nil
	}
	old, _ := oldObj.(*v1.Node)
	if old != nil && old.Annotations[protocol.AnnotationInventory] == node.Annotations[protocol.AnnotationInventory] &&
		old.Labels[protocol.LabelDeviceEnable] == node.Labels[protocol.LabelDeviceEnable] &&
		old.Labels[protocol.LabelMixedEnable] == node.Labels[protocol.LabelMixedEnable] &&
		!allocatableGrew(old, node) {
		logger.V(5).Info("node's qGPU inventory, labels and allocatable did not change", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.QueueSkip, nil
	}
	if req, err := request.Parse(pod); err == nil && req != nil && req.Class != protocol.ClassGeneral &&
		node.Labels[protocol.LabelMixedEnable] != protocol.LabelValueEnable {
		logger.V(5).Info("node does not take online/offline pods", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.QueueSkip, nil
	}
	// As for deleted pods: the ledger must know the new cards before the
	// retry, whichever informer handler runs first.
	p.setNode(klog.NewContext(context.Background(), logger), node)
	return fwk.Queue, nil
}

// allocatableGrew reports whether the node offers more of a qGPU resource.
func allocatableGrew(old, node *v1.Node) bool {
	for _, name := range protocol.Resources {
		was, now := old.Status.Allocatable[v1.ResourceName(name)], node.Status.Allocatable[v1.ResourceName(name)]
		if now.Cmp(was) > 0 {
			return true
		}
	}
	return false
}
