package qgpu

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestStaleClaimOfABoundPodKept: after a failover the new leader's
// informer still shows the pod unbound while the API server has it bound
// (the old leader's Bind landed). PreFilter finds the claim allocated for
// the "unbound" pod, but the release asks the API server and keeps the
// claim: the kubelet must be able to prepare it. Every cycle of the pod
// queues the same key, not a goroutine each. Fails on eebf961 (the claim
// of the bound pod was deallocated from the cache's view).
func TestStaleClaimOfABoundPodKept(t *testing.T) {
	share := types.UID("00000000-0000-0000-0000-0000000000k1")
	claim := draClaim("k1", protocol.ClassGeneral, "1Gi", "10")
	cached := draPod("p", "k1")
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: protocol.DRADriver, Pool: "n1", Device: "gpu-0", ShareID: &share}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: cached.UID}}
	p := draWorld(t, claim)
	ctx := context.Background()
	bound := cached.DeepCopy()
	bound.Spec.NodeName = "n1"
	if _, err := p.handle.ClientSet().CoreV1().Pods("default").Create(ctx, bound, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const cycles = 5
	for range cycles {
		_, st := p.PreFilter(ctx, framework.NewCycleState(), cached, nil)
		if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "is allocated") {
			t.Fatalf("PreFilter: %v, want Unschedulable (waiting)", st)
		}
	}
	waitFor(t, func() bool { return p.stale.handled.Load() >= 1 && p.stale.queue.Len() == 0 })
	if n := p.stale.handled.Load(); n > cycles {
		t.Errorf("%d releases handled for %d cycles", n, cycles)
	}
	if c := readClaim(t, p, "k1"); c.Status.Allocation == nil || len(c.Status.ReservedFor) != 1 {
		t.Fatalf("the claim of a pod the API server has bound was released: %+v", c.Status)
	}
}
