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

// TestClaimsShareIDPerAllocation: every allocation of a claim draws its own
// share ID (as upstream's allocator does), so a node can tell a claim
// re-allocated before it unprepared the old allocation, and Unreserve of an
// older cycle cannot take back a newer allocation of the same claim.
func TestClaimsShareIDPerAllocation(t *testing.T) {
	p := draWorld(t, draClaim("r1", protocol.ClassGeneral, "2Gi", "20"))
	p.setNodes(t4Node("n1", 2, false))
	ctx := context.Background()
	pod := draPod("p", "r1")
	if _, err := p.handle.ClientSet().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := reservedCycle(t, p, pod, "n1")
	if st := p.PreBind(ctx, first, pod, "n1"); !st.IsSuccess() {
		t.Fatal(st)
	}
	share1 := *readClaim(t, p, "r1").Status.Allocation.Devices.Results[0].ShareID
	p.Unreserve(ctx, first, pod, "n1")
	second := reservedCycle(t, p, pod, "n1")
	if st := p.PreBind(ctx, second, pod, "n1"); !st.IsSuccess() {
		t.Fatal(st)
	}
	share2 := *readClaim(t, p, "r1").Status.Allocation.Devices.Results[0].ShareID
	if share1 == share2 || share1 == "00000000-0000-0000-0000-0000000000r1" {
		t.Fatalf("share IDs %s and %s: want a fresh one per allocation", share1, share2)
	}
	// The first cycle's Unreserve, late, leaves the second's allocation.
	p.releaseClaims(ctx, mustState(t, first), pod)
	if c := readClaim(t, p, "r1"); c.Status.Allocation == nil || *c.Status.Allocation.Devices.Results[0].ShareID != share2 {
		t.Fatalf("a stale Unreserve took back the newer allocation: %+v", c.Status)
	}
}

func mustState(t *testing.T, cs fwk.CycleState) *cycleState {
	t.Helper()
	s, err := readState(cs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
