package qgpu

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// PreBindPreFlight skips PreBind for pods without qGPU requests, and when
// this plugin's Bind writes the assignment with the binding and the pod has
// no claims to allocate.
func (p *QGPU) PreBindPreFlight(_ context.Context, cs fwk.CycleState, _ *v1.Pod, _ string) *fwk.Status {
	if s, err := readState(cs); err != nil || (s.join == nil && (s.req.CPUOnly() || (p.bindsItself() && len(s.req.Claims) == 0))) {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// PreBind allocates the pod's qGPU claims (claims.go), then writes the
// assignment annotation; any assignment a user wrote into the pod is
// replaced. Profiles that enable QGPU at the bind point skip the annotation
// (see Bind): that part serves profiles that bind with DefaultBinder only.
func (p *QGPU) PreBind(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	s, err := readState(cs)
	if err == nil && s.join != nil {
		if err := p.joinClaims(ctx, s.join, pod); err != nil {
			return fwk.AsStatus(fmt.Errorf("joining the shared qGPU claims of pod %s: %w", klog.KObj(pod), err))
		}
		return nil // bound without an assignment: its slices are its claims'
	}
	if err == nil && len(s.req.Claims) > 0 {
		s.claimsWritten = true
		if err := p.allocateClaims(ctx, s, pod, nodeName); err != nil {
			return fwk.AsStatus(fmt.Errorf("allocating the qGPU claims of pod %s: %w", klog.KObj(pod), err))
		}
	}
	if err != nil || s.req.CPUOnly() || p.bindsItself() {
		// Not a qGPU pod, or Bind writes the assignment with the binding.
		// (PreBindPreFlight's Skip is honoured only behind an alpha gate in
		// 1.34, so PreBind checks for itself.)
		return nil
	}
	value, err := encodeAssignment(s, pod, nodeName)
	if err != nil {
		return fwk.AsStatus(err)
	}
	pods := p.handle.ClientSet().CoreV1().Pods(pod.Namespace)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID {
			return fmt.Errorf("pod %s was re-created (uid %s, want %s)", klog.KObj(pod), cur.UID, pod.UID)
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[protocol.AnnotationAssignment] = value
		_, err = pods.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("writing assignment of pod %s: %w", klog.KObj(pod), err))
	}
	p.placements.placed(s.req.Class)
	return nil
}
