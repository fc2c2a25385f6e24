package qgpu

import (
	"context"
	"reflect"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// EventsToRegister: a qGPU pod leaving a node (deleted or finished) frees
// slices, or at least the qGPU resources it requested there, and a pod
// asking for nvidia.com/gpu leaving a node may open it to a node-exclusive
// pod (docs/node-exclusive.md); a node gaining
// or changing its qGPU inventory, labels or allocatable qGPU resources (its
// agent's device plugins registering again) may add room; a pending pod's
// own edit (its class or model filters) may make it fit.
//
// The hints only decide. They run on the queue's listener and are replayed
// later, for pods in a scheduling cycle, with the objects of the time of the
// event, so what they see may be stale: the ledger is written by the
// informer handlers alone (watch.go), which wake the waiting pods once they
// have written it (waiting.go).
func (p *QGPU) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: p.isSchedulableAfterPodDeleted},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: p.isSchedulableAfterPodUpdate},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeAnnotation | fwk.UpdateNodeAllocatable},
			QueueingHintFn: p.isSchedulableAfterNodeChange},
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: isSchedulableAfterClaimChange},
	}, nil
}

// isSchedulableAfterClaimChange requeues a pod waiting for one of its own
// ResourceClaims: created from its template, or released (claims.go).
func isSchedulableAfterClaimChange(logger klog.Logger, pod *v1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	claim, ok := newObj.(*resourceapi.ResourceClaim)
	if !ok || claim.Namespace != pod.Namespace {
		return fwk.QueueSkip, nil
	}
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil && *pc.ResourceClaimName == claim.Name {
			return fwk.Queue, nil
		}
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil && *st.ResourceClaimName == claim.Name {
			return fwk.Queue, nil
		}
	}
	for _, o := range claim.OwnerReferences {
		if o.UID == pod.UID {
			return fwk.Queue, nil
		}
	}
	logger.V(5).Info("claim of another pod", "pod", klog.KObj(pod), "claim", klog.KObj(claim))
	return fwk.QueueSkip, nil
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
	// asksGPU, not request.Asks: a pod asking for nvidia.com/gpu alone holds
	// no qGPU resources but keeps node-exclusive pods off its node.
	if _, assigned := gone.Annotations[protocol.AnnotationAssignment]; !assigned && !asksGPU(gone) {
		logger.V(5).Info("deleted pod held no GPU resources", "pod", klog.KObj(pod), "deleted", klog.KObj(gone))
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// isSchedulableAfterPodUpdate requeues a pending pod whose own edit changed
// what it asks of the cards: its class, its model filters, its requests.
// Updates of other pods never add room (a bound pod's qGPU requests cannot
// change, and a finished pod arrives as a delete).
func (p *QGPU) isSchedulableAfterPodUpdate(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	old, okOld := oldObj.(*v1.Pod)
	cur, okNew := newObj.(*v1.Pod)
	if !okOld || !okNew {
		return fwk.Queue, nil
	}
	if cur.UID != pod.UID {
		logger.V(5).Info("another pod's update adds no qGPU room", "pod", klog.KObj(pod), "updated", klog.KObj(cur))
		return fwk.QueueSkip, nil
	}
	// The claim made from its template now named in its status: a cycle
	// requeued by the claim's creation may have run before this update
	// and found no claim (claims.go).
	if !reflect.DeepEqual(old.Status.ResourceClaimStatuses, cur.Status.ResourceClaimStatuses) {
		return fwk.Queue, nil
	}
	wasReq, wasErr := request.Parse(old)
	nowReq, nowErr := request.Parse(cur)
	if reflect.DeepEqual(wasReq, nowReq) && errorText(wasErr) == errorText(nowErr) {
		logger.V(5).Info("pod's qGPU request did not change", "pod", klog.KObj(pod))
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (p *QGPU) isSchedulableAfterNodeChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	node, ok := newObj.(*v1.Node)
	if !ok {
		return fwk.Queue, nil
	}
	old, _ := oldObj.(*v1.Node)
	if !nodeMayAddRoom(old, node) {
		logger.V(5).Info("node's qGPU inventory, labels and allocatable did not change, or it is not a qGPU node", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.QueueSkip, nil
	}
	if req, err := request.Parse(pod); err == nil && req != nil && req.Class != protocol.ClassGeneral &&
		node.Labels[protocol.LabelMixedEnable] != protocol.LabelValueEnable {
		logger.V(5).Info("node does not take online/offline pods", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// nodeMayAddRoom reports whether a node change (old nil: a new node) can let
// a waiting pod fit: a qGPU node that is new, or whose inventory or labels
// changed, or that offers more of a qGPU resource.
func nodeMayAddRoom(old, node *v1.Node) bool {
	if node.Labels[protocol.LabelDeviceEnable] != protocol.LabelValueEnable {
		return false
	}
	return old == nil || old.Annotations[protocol.AnnotationInventory] != node.Annotations[protocol.AnnotationInventory] ||
		old.Labels[protocol.LabelDeviceEnable] != node.Labels[protocol.LabelDeviceEnable] ||
		old.Labels[protocol.LabelMixedEnable] != node.Labels[protocol.LabelMixedEnable] ||
		allocatableGrew(old, node)
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
