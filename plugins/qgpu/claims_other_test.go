package qgpu

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestClaimsOfAnotherDriverRefused: a pod with a qGPU claim and a claim of
// another driver (a NIC beside the GPU slice) is refused in PreFilter,
// naming the other claim: qgpu-scheduler would bind it with that claim
// unallocated, and the kubelet would wait for ever. Fails on eebf961 (the
// pod was placed).
func TestClaimsOfAnotherDriverRefused(t *testing.T) {
	nic := draClaim("nic", protocol.ClassGeneral, "1Gi", "")
	nic.Spec.Devices.Requests[0].Exactly.DeviceClassName = "rdma.nic.example.com"
	nic.Spec.Devices.Requests[0].Exactly.Capacity = nil
	p := draWorld(t, draClaim("gpu", protocol.ClassGeneral, "2Gi", "20"), nic)
	pod := draPod("both", "gpu")
	pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: "net", ResourceClaimName: ptr.To("nic")})
	pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims, v1.ResourceClaim{Name: "net"})
	_, st := p.PreFilter(context.Background(), framework.NewCycleState(), pod, nil)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "resourceClaims[net]: names no qGPU DeviceClass") {
		t.Fatalf("PreFilter: %v, want UnschedulableAndUnresolvable naming resourceClaims[net]", st)
	}
	// The qGPU claim alone is placed as before.
	if _, st := p.PreFilter(context.Background(), framework.NewCycleState(), draPod("alone", "gpu"), nil); !st.IsSuccess() {
		t.Fatalf("the qGPU claim alone: %v", st)
	}
}
