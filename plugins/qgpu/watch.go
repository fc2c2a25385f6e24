package qgpu

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

// watch feeds the ledger from the scheduler's informers: node inventories,
// and the assignments of bound pods (the rebuild after a restart); and the
// workload from the bound pods, those in the informer's initial list once
// it has synced (learn.go). Terminal
// and deleted pods free their slices at once (the scheduler's pod informer
// drops terminal pods, so they arrive as deletes). These handlers are the
// only writers of the ledger besides Reserve and Unreserve: the queueing
// hints only decide (events.go), and a change that adds room wakes the pods
// waiting for it (waiting.go).
func (s *shared) watch(ctx context.Context, h fwk.Handle) error {
	f := h.SharedInformerFactory()
	logger := klog.FromContext(ctx)
	nodes, err := f.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.nodeChanged(ctx, h, nil, obj.(*v1.Node)) },
		UpdateFunc: func(old, obj any) {
			s.nodeChanged(ctx, h, old.(*v1.Node), obj.(*v1.Node))
		},
		DeleteFunc: func(obj any) {
			if n, ok := tombstone[*v1.Node](obj); ok {
				s.ledger.RemoveNode(n.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching nodes: %w", err)
	}
	pods, err := f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			pod := obj.(*v1.Pod)
			s.observePod(ctx, pod)
			if !initial {
				s.learnBound(nil, pod)
			}
		},
		UpdateFunc: func(old, obj any) {
			pod := obj.(*v1.Pod)
			s.observePod(ctx, pod)
			s.learnBound(old.(*v1.Pod), pod)
		},
		DeleteFunc: func(obj any) {
			if pod, ok := tombstone[*v1.Pod](obj); ok {
				s.waiting.forget(pod)
				s.release(logger, pod)
				s.workload.Forget(pod.UID)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching pods: %w", err)
	}
	learned := make(chan struct{})
	go s.learnCluster(ctx, f.Core().V1().Pods().Informer().GetStore(), learned, nodes.HasSynced, pods.HasSynced)
	s.synced = []cache.InformerSynced{nodes.HasSynced, pods.HasSynced, closed(learned)}
	return nil
}

// release frees the slices of a pod that is gone (deleted, or terminated),
// whatever their state, and wakes the pods waiting for room.
func (s *shared) release(logger klog.Logger, pod *v1.Pod) {
	if s.ledger.Release(pod.UID, "") {
		logger.V(5).Info("qGPU slices freed", "pod", klog.KObj(pod))
		s.waiting.wake(logger, true)
	}
}

// nodeChanged reads a node into the ledger and, when the change can add
// room (the same test as the node hint's), wakes the waiting pods.
func (s *shared) nodeChanged(ctx context.Context, h fwk.Handle, old, node *v1.Node) {
	setNode(ctx, h, s.ledger, node)
	if nodeMayAddRoom(old, node) {
		s.waiting.wake(klog.FromContext(ctx), node.Labels[protocol.LabelMixedEnable] == protocol.LabelValueEnable)
	}
}

func tombstone[T any](obj any) (T, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, ok := obj.(T)
	return t, ok
}

// setNode reads a node's inventory into the ledger. A qGPU node without a
// valid inventory has no cards; the reason goes to an event on the node.
func setNode(ctx context.Context, h fwk.Handle, l *ledger.Ledger, node *v1.Node) {
	var alloc [len(protocol.Resources)]int64
	for i, name := range protocol.Resources {
		q := node.Status.Allocatable[v1.ResourceName(name)]
		alloc[i] = q.Value()
	}
	l.SetAllocatable(node.Name, alloc)
	if node.Labels[protocol.LabelDeviceEnable] != protocol.LabelValueEnable {
		l.SetNode(node.Name, nil, ReasonNotQGPUNode, false)
		return
	}
	mixed := node.Labels[protocol.LabelMixedEnable] == protocol.LabelValueEnable
	raw, ok := node.Annotations[protocol.AnnotationInventory]
	if !ok {
		l.SetNode(node.Name, nil, "no annotation "+protocol.AnnotationInventory, mixed)
		return
	}
	inv, err := protocol.DecodeInventory([]byte(raw))
	if err != nil {
		reason := err.Error()
		before, _ := l.CopyNode(node.Name, nil)
		l.SetNode(node.Name, nil, reason, mixed)
		if before.Invalid != reason {
			klog.FromContext(ctx).Info("qGPU node has an invalid inventory; treating it as having no cards", "node", klog.KObj(node), "err", err)
			if rec := h.EventRecorder(); rec != nil {
				rec.Eventf(node, nil, v1.EventTypeWarning, "InvalidQGPUInventory", "Scheduling", "node has no usable qGPU cards: %s", truncate(reason, 512))
			}
		}
		return
	}
	l.SetNode(node.Name, inv, "", mixed)
}

// observePod records the assignment of a bound pod. Only the scheduler's own
// assignments count: bound to the pod's UID and to the node it runs on. An
// unbound pod may settle a binding with an unknown outcome.
func (s *shared) observePod(ctx context.Context, pod *v1.Pod) {
	s.waiting.track(pod)
	if pod.Spec.NodeName == "" {
		s.settle(klog.FromContext(ctx), pod)
		return
	}
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		s.release(klog.FromContext(ctx), pod)
		return
	}
	raw, ok := pod.Annotations[protocol.AnnotationAssignment]
	if !ok {
		return
	}
	a, err := trustedAssignment(pod, raw)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("ignoring qGPU assignment", "pod", klog.KObj(pod), "err", err)
		return
	}
	h := ledger.Holding{Node: a.Node, Class: a.Class, Namespace: pod.Namespace}
	for _, c := range a.Containers {
		h.Slices = append(h.Slices, c.Slices...)
	}
	changed, over := s.ledger.ObserveChecked(pod.UID, h)
	if changed {
		klog.FromContext(ctx).V(5).Info("qGPU slices observed", "pod", klog.KObj(pod), "node", a.Node)
	}
	if len(over) > 0 {
		s.overbooked(klog.FromContext(ctx), pod, a.Node, over)
	}
}

// settle frees the slices of a binding with an unknown outcome once the pod
// is seen unbound at a newer version than the binding was conditioned on
// (ledger.Unbound), and wakes the pods waiting for room, the pod itself
// among them.
func (s *shared) settle(logger klog.Logger, pod *v1.Pod) {
	if v, ok := podVersion(pod); ok && s.ledger.Unbound(pod.UID, v) {
		logger.V(2).Info("Binding with an unknown outcome was not written; qGPU slices freed", "pod", klog.KObj(pod), "resourceVersion", pod.ResourceVersion)
		s.waiting.wake(logger, true)
	}
}

func trustedAssignment(pod *v1.Pod, raw string) (*protocol.Assignment, error) {
	a, err := protocol.DecodeAssignment([]byte(raw))
	if err != nil {
		return nil, err
	}
	if types.UID(a.PodUID) != pod.UID || a.Node != pod.Spec.NodeName {
		return nil, fmt.Errorf("assignment was not made for this pod (uid %q, node %q)", a.PodUID, a.Node)
	}
	return a, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
