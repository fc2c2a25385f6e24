package qgpu

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Bind binds a qGPU pod with its assignment in one API call: the
// pods/binding subresource copies the Binding's annotations onto the pod, so
// the assignment appears together with spec.nodeName, and a user-written
// assignment is replaced. It saves PreBind's Get+Update per pod. Pods without
// qGPU requests (no cycleState, or a CPU-only one) are left to DefaultBinder
// (Skip). On failure the framework calls Unreserve, as it does when PreBind
// fails; a failure whose outcome is unknown keeps the slices held through it
// (bindoutcome.go).
func (p *QGPU) Bind(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	s, err := readState(cs)
	if err != nil || s.req.CPUOnly() || s.join != nil {
		return fwk.NewStatus(fwk.Skip) // DefaultBinder; a joining pod has no assignment
	}
	value, err := encodeAssignment(s, pod, nodeName)
	if err != nil {
		return fwk.AsStatus(err)
	}
	binding := &v1.Binding{
		// UID and ResourceVersion are preconditions: the apiserver binds
		// only this pod at this version, so a read that finds it unbound at
		// a newer version proves the binding was not written and never will be.
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			Annotations: map[string]string{protocol.AnnotationAssignment: value}},
		Target: v1.ObjectReference{Kind: "Node", Name: nodeName},
	}
	if err := p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		switch p.bindOutcome(ctx, pod, nodeName, value, err) {
		case bindWritten:
			klog.FromContext(ctx).V(2).Info("Binding call failed, but the pod is bound with its assignment", "pod", klog.KObj(pod), "node", nodeName, "err", err)
		case bindUnknown:
			p.holdUncertain(ctx, pod, nodeName)
			return fwk.AsStatus(fmt.Errorf("binding pod %s with its assignment, outcome unknown (its qGPU slices stay held until the API shows it): %w", klog.KObj(pod), err))
		default:
			return fwk.AsStatus(fmt.Errorf("binding pod %s with its assignment: %w", klog.KObj(pod), err))
		}
	}
	p.placements.placed(s.req.Class)
	return nil
}

// encodeAssignment is the annotation value for what Reserve decided.
func encodeAssignment(s *cycleState, pod *v1.Pod, nodeName string) (string, error) {
	a := protocol.Assignment{
		Version: protocol.AssignmentVersion, PodUID: string(pod.UID), Node: nodeName,
		Class: s.req.Class, Containers: s.assignment,
	}
	value, err := a.Encode()
	if err != nil {
		return "", fmt.Errorf("encoding assignment: %w", err)
	}
	return value, nil
}

// pluginLister is the part of the framework that lists its plugins.
type pluginLister interface{ ListPlugins() *config.Plugins }

// bindsItself reports whether the profile runs this plugin's Bind before
// DefaultBinder (config/*.yaml enable QGPU at the bind point); PreBind then
// leaves the assignment to Bind. Asked once: the framework is complete only
// after every plugin was built.
func (p *QGPU) bindsItself() bool {
	p.bindOnce.Do(func() {
		l, ok := p.handle.(pluginLister)
		if !ok {
			return
		}
		var order []string
		for _, b := range l.ListPlugins().Bind.Enabled {
			order = append(order, b.Name)
		}
		i := slices.Index(order, Name)
		j := slices.Index(order, names.DefaultBinder)
		p.binds = i >= 0 && (j < 0 || i < j)
	})
	return p.binds
}
