package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// The tenant suite's claim joined by a nodeName pod (tenant.go).

// claimJoin, on the DRA node n: the tenant's pod A holds a claim of a
// whole T4's memory; pod B, with spec.nodeName set, joins A's allocated
// claim; A is deleted. The claim's slice must stay counted: of two new
// pods asking for a card's memory each, one runs on the other card and
// the second stays Pending. Control: B deleted and the claim deleted, the
// second pod is placed on the card the claim held.
func (t *tenantSuite) claimJoin(n *node) {
	const key = "a nodeName pod joins another pod's claim, the first deleted"
	claims := t.tenant.ResourceV1().ResourceClaims(tenantNamespace)
	spec := claimTemplate("tenant-card", protocol.ClassGeneral, "14Gi", "10")
	spec.Namespace = tenantNamespace
	if _, err := t.tenant.ResourceV1().ResourceClaimTemplates(tenantNamespace).Create(t.ctx, spec, metav1.CreateOptions{}); err != nil {
		t.fail("%s: template: %v", key, err)
		t.notAttempted(key, err.Error())
		return
	}
	shared := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "tenant-shared", Namespace: tenantNamespace}, Spec: spec.Spec.Spec}
	if _, err := claims.Create(t.ctx, shared, metav1.CreateOptions{}); err != nil {
		t.fail("%s: claim: %v", key, err)
		t.notAttempted(key, err.Error())
		return
	}
	claimPod := func(name string, claim *string, template *string) *corev1.Pod {
		p := t.pod(tenantNamespace, name, n)
		p.Spec.NodeSelector = nil
		p.Annotations = map[string]string{protocol.AnnotationUseGPUType: "t4"}
		p.Spec.SchedulerName = protocol.SchedulerName
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: claim, ResourceClaimTemplateName: template}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		return p
	}
	run := func(p *corev1.Pod) (*corev1.Pod, error) {
		t.res.containers++
		if _, err := t.tenant.CoreV1().Pods(tenantNamespace).Create(t.ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		return waitPodSettledIn(t.ctx, t.cp, tenantNamespace, p.Name)
	}
	name := shared.Name
	if _, err := run(claimPod("tenant-claim-a", &name, nil)); err != nil {
		t.fail("%s: pod A: %v", key, err)
		t.notAttempted(key, err.Error())
		return
	}
	b := claimPod("tenant-claim-b", &name, nil)
	b.Spec.SchedulerName = corev1.DefaultSchedulerName
	b.Spec.NodeName = n.name
	if _, err := run(b); err != nil {
		t.fail("%s: pod B (nodeName): %v", key, err)
		t.notAttempted(key, err.Error())
		return
	}
	claim, err := claims.Get(t.ctx, name, metav1.GetOptions{})
	if err != nil || claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) == 0 {
		t.fail("%s: the shared claim is not allocated: %v", key, err)
		t.notAttempted(key, "claim not allocated")
		return
	}
	heldCard := claim.Status.Allocation.Devices.Results[0].Device
	if err := t.tenant.CoreV1().Pods(tenantNamespace).Delete(t.ctx, "tenant-claim-a", metav1.DeleteOptions{}); err != nil {
		t.fail("%s: deleting A: %v", key, err)
	}
	if err := waitGone(t.ctx, t.cp, tenantNamespace, "tenant-claim-a"); err != nil {
		t.fail("%s: A not gone: %v", key, err)
	}
	fmt.Printf("     tenant %s: pods A and B held claim %s (device %s); A deleted, B still holds it\n", key, name, heldCard)
	tmpl := "tenant-card"
	for _, c := range []string{"tenant-claim-c1", "tenant-claim-c2"} {
		t.res.containers++
		if _, err := t.tenant.CoreV1().Pods(tenantNamespace).Create(t.ctx, claimPod(c, nil, &tmpl), metav1.CreateOptions{}); err != nil {
			t.fail("%s: %s: %v", key, c, err)
			t.notAttempted(key, err.Error())
			return
		}
	}
	// One of the two runs (the other card); the other must stay Pending:
	// bounded wait for one running and a FailedScheduling of the other.
	var running, pending string
	err = wait.PollUntilContextTimeout(t.ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		running, pending = "", ""
		for _, c := range []string{"tenant-claim-c1", "tenant-claim-c2"} {
			p, err := t.cp.Client.CoreV1().Pods(tenantNamespace).Get(ctx, c, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			switch {
			case p.Status.Phase == corev1.PodRunning:
				running = c
			case p.Spec.NodeName == "" && failedScheduling(ctx, t.cp, c):
				pending = c
			}
		}
		return running != "" && pending != "", nil
	})
	if err != nil {
		t.escaped(key, fmt.Sprintf("after 2m running %q pending %q: want one of each", running, pending))
		return
	}
	// Hold a few seconds more: the pending pod must not be placed.
	time.Sleep(5 * time.Second)
	if p, err := t.cp.Client.CoreV1().Pods(tenantNamespace).Get(t.ctx, pending, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.escaped(key, pending+" was placed on the claim's memory")
		return
	}
	t.refused(key, fmt.Sprintf("the ledger counting the claim by claim: %s runs on the other card, %s stays Pending", running, pending))
	// Control: release the claim (B deleted, the claim deleted); the
	// pending pod made again is placed on the card the claim held. (The
	// pending pod itself is placed as soon as the claim is deallocated:
	// the ledger's claim handler wakes the waiting pods, and in the run of
	// 2026-11-28 11:50 the scheduler bound it 3 s after B went, before this
	// deleted it. Making it again keeps the control independent of that.)
	_ = t.tenant.CoreV1().Pods(tenantNamespace).Delete(t.ctx, "tenant-claim-b", metav1.DeleteOptions{})
	_ = waitGone(t.ctx, t.cp, tenantNamespace, "tenant-claim-b")
	_ = claims.Delete(t.ctx, name, metav1.DeleteOptions{})
	_ = t.tenant.CoreV1().Pods(tenantNamespace).Delete(t.ctx, pending, metav1.DeleteOptions{})
	_ = waitGone(t.ctx, t.cp, tenantNamespace, pending)
	err = wait.PollUntilContextTimeout(t.ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := t.cp.Client.ResourceV1().ResourceClaims(tenantNamespace).Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.control(key, false, "(the claim released): claim "+name+" still there: "+err.Error())
		return
	}
	again := pending + "-again"
	p, err := run(claimPod(again, nil, &tmpl))
	if err != nil {
		t.control(key, false, "(B and the claim deleted): "+again+" not running: "+err.Error())
		return
	}
	device := ""
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			if c, err := claims.Get(t.ctx, *st.ResourceClaimName, metav1.GetOptions{}); err == nil && c.Status.Allocation != nil && len(c.Status.Allocation.Devices.Results) > 0 {
				device = c.Status.Allocation.Devices.Results[0].Device
			}
		}
	}
	t.control(key, device == heldCard, fmt.Sprintf("(B and the claim deleted): %s, made again, runs on %s, device %s (the claim held %s)", again, p.Spec.NodeName, device, heldCard))
	_ = deleteAndWaitIn(t.ctx, t.cp, tenantNamespace, "app.kubernetes.io/part-of="+tenantLabel)
}

// failedScheduling reports whether the pod has a FailedScheduling event
// that is not about its claim not being created yet.
func failedScheduling(ctx context.Context, cp *harness.ControlPlane, pod string) bool {
	list, err := cp.Client.CoreV1().Events(tenantNamespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod + ",reason=FailedScheduling"})
	if err != nil {
		return false
	}
	for _, e := range list.Items {
		if !strings.Contains(e.Message, "is not created yet") {
			return true
		}
	}
	return false
}

// waitGone waits (bounded) until the pod no longer exists.
func waitGone(ctx context.Context, cp *harness.ControlPlane, ns, name string) error {
	return wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
}
