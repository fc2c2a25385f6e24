package view

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// claimedPod is a pod on n1 whose container c uses claim "cl", assigned
// 4 GiB and 30 cores of card 1.
func claimedPod(t *testing.T) v1.Pod {
	pod := placed(t, builders.GPUPod("p").Container("c", nil), one(sl(1, 4, 30)))
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("cl")}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	return pod
}

// claimFor is claim "cl" allocated as device on pool n1 with the given
// consumption, reserved for pod.
func claimFor(pod v1.Pod, device string, gib, cores int64) resourceapi.ResourceClaim {
	consumed := map[resourceapi.QualifiedName]resource.Quantity{protocol.DRACapacityMemory: *resource.NewQuantity(gib<<30, resource.BinarySI)}
	if cores > 0 {
		consumed[protocol.DRACapacityCores] = *resource.NewQuantity(cores, resource.DecimalSI)
	}
	return resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: "cl"},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: protocol.DRADriver, Pool: "n1", Device: device, ConsumedCapacity: consumed}}}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}},
		},
	}
}

// TestCheckClaims: kubectl qgpu check reads a claimed pod's slice from its
// assignment (the card counts it) and finds every disagreement between the
// assignment and the claim's allocation.
func TestCheckClaims(t *testing.T) {
	pod := claimedPod(t)
	unallocated := claimFor(pod, "gpu-1", 4, 30)
	unallocated.Status.Allocation = nil
	unreserved := claimFor(pod, "gpu-1", 4, 30)
	unreserved.Status.ReservedFor = nil
	for _, tc := range []struct {
		name  string
		claim resourceapi.ResourceClaim
		want  string
	}{
		{"agrees", claimFor(pod, "gpu-1", 4, 30), ""},
		{"another card", claimFor(pod, "gpu-0", 4, 30), "allocated n1/gpu-0"},
		{"more memory", claimFor(pod, "gpu-1", 8, 30), "memory 8Gi"},
		{"fewer cores", claimFor(pod, "gpu-1", 4, 10), "cores 10"},
		{"not allocated", unallocated, "not allocated"},
		{"not reserved", unreserved, "not reserved for the pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Build([]v1.Node{*gpuNode(false)}, []v1.Pod{pod}, 0)
			if len(c.Pods) != 1 || !c.Pods[0].Claimed || c.Nodes[0].Cards[1].UsedMemoryGiB != 4 {
				t.Fatalf("the claimed pod is not counted: %+v %+v", c.Pods, c.Nodes)
			}
			if v := c.Check(); len(v) != 0 {
				t.Fatalf("Check: %v", v)
			}
			v := c.CheckClaims([]resourceapi.ResourceClaim{tc.claim})
			switch {
			case tc.want == "" && len(v) != 0:
				t.Errorf("violations %v", v)
			case tc.want != "" && (len(v) != 1 || v[0].Kind != "ClaimMismatch" || !strings.Contains(v[0].Detail, tc.want)):
				t.Errorf("violations %v, want one ClaimMismatch containing %q", v, tc.want)
			}
		})
	}
}

// TestClaimsOutliveTheirPods: kubectl qgpu sees what the scheduler's
// ledger holds: a claimed pod's slice once while the pod holds it, the
// claim's own once the pod is gone and the claim is still allocated (a pod
// joined it by spec.nodeName), and a card oversubscribed when another pod
// was placed on that memory. Fails where only pods are counted (eebf961).
func TestClaimsOutliveTheirPods(t *testing.T) {
	pod := claimedPod(t)
	claim := claimFor(pod, "gpu-1", 4, 30)
	claim.UID = "uid-cl"
	claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "joined", UID: "uid-joined"})

	c := Build([]v1.Node{*gpuNode(false)}, []v1.Pod{pod}, 0)
	c.AddClaims([]resourceapi.ResourceClaim{claim})
	if got := c.Nodes[0].Cards[1].UsedMemoryGiB; got != 4 {
		t.Fatalf("pod and claim: card 1 holds %d GiB, want 4 (counted once)", got)
	}
	if got := c.Nodes[0].Holders[1]; len(got) != 1 || got[0] != pod.Namespace+"/p" {
		t.Errorf("pod and claim: holders %v", got)
	}

	// The pod is deleted; the claim stays allocated for the joined pod, and
	// a 14 GiB pod was placed on the same 16 GiB card.
	over := placed(t, builders.GPUPod("over").General("c", 14, 10), one(sl(1, 14, 10)))
	c = Build([]v1.Node{*gpuNode(false)}, []v1.Pod{over}, 0)
	c.AddClaims([]resourceapi.ResourceClaim{claim})
	if got := c.Nodes[0].Cards[1].UsedMemoryGiB; got != 18 {
		t.Fatalf("claim after its pod: card 1 holds %d GiB, want the claim's 4 and the pod's 14", got)
	}
	if got := strings.Join(c.Nodes[0].Holders[1], ","); !strings.Contains(got, "claim "+pod.Namespace+"/cl") {
		t.Errorf("holders of card 1: %s, want the claim named", got)
	}
	v := c.Check()
	if len(v) == 0 || v[0].Kind != "Oversubscribed" || v[0].Object != "n1/card1" {
		t.Errorf("Check: %v, want n1/card1 oversubscribed", v)
	}

	// Another driver's claim counts nothing.
	other := claimFor(pod, "nic-0", 4, 30)
	other.Status.Allocation.Devices.Results[0].Driver = "nic.example.com"
	c = Build([]v1.Node{*gpuNode(false)}, nil, 0)
	c.AddClaims([]resourceapi.ResourceClaim{other})
	if got := c.Nodes[0].Cards[0].UsedMemoryGiB + c.Nodes[0].Cards[1].UsedMemoryGiB; got != 0 {
		t.Errorf("another driver's claim: %d GiB held", got)
	}
}
