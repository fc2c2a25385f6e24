package qgpu

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// allocatedClaim is claim allocated on node's card index with memory and
// cores consumed, reserved for the given pods.
func allocatedClaim(claim *resourceapi.ResourceClaim, node string, index int, memGiB, cores int64, pods ...*v1.Pod) *resourceapi.ResourceClaim {
	c := claim.DeepCopy()
	share := c.UID
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: protocol.DRADriver, Pool: node, Device: protocol.DRADeviceName(index), ShareID: &share,
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
			protocol.DRACapacityMemory: *resource.NewQuantity(memGiB<<30, resource.BinarySI),
			protocol.DRACapacityCores:  *resource.NewQuantity(cores, resource.DecimalSI),
		},
	}}}}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

// TestClaimHoldsItsSliceUntilCleared: pod A is bound with claim c's slice;
// pod B joins c by spec.nodeName. Deleting A leaves c allocated and used by
// B: the slice stays held, and a second pod is not placed on that memory,
// until the allocation is cleared. Fails where the ledger counts slices by
// pod only (eebf961).
func TestClaimHoldsItsSliceUntilCleared(t *testing.T) {
	ctx := context.Background()
	slice := protocol.Slice{Index: 0, UUID: "GPU-Tesla-T4-00", MemoryGiB: 10, Cores: 50}
	a := boundPod("a", "n1", "uid-a", slice)
	b := boundPod("b", "n1", "uid-b", slice)
	delete(b.Annotations, protocol.AnnotationAssignment) // bound by spec.nodeName: no scheduler saw it
	claim := allocatedClaim(draClaim("shared", protocol.ClassGeneral, "10Gi", "50"), "n1", 0, 10, 50, a, b)
	node := t4Node("n1", 1, false)
	p, cs := liveWorld(t, node, a, b, claim)
	usedMem := func() int64 {
		n, _ := p.ledger.CopyNode("n1", nil)
		if len(n.Cards) == 0 {
			return -1
		}
		return n.Cards[0].UsedMemoryGiB
	}
	waitFor(t, func() bool { return usedMem() == 10 })

	if err := cs.CoreV1().Pods("default").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, ok := p.ledger.Holding("uid-a"); return !ok })
	if got := usedMem(); got != 10 {
		t.Fatalf("after deleting a, card 0 holds %d GiB; the claim b uses still holds 10", got)
	}
	if _, counted, ok := p.ledger.ClaimHolding(claim.UID); !ok || !counted {
		t.Fatalf("claim entry %v, counted by the claim %v: want it recorded and counted by the claim", ok, counted)
	}
	// 10 GiB of the 15 GiB card are the claim's: an 8 GiB pod does not fit.
	big := boundPod("big", "", "uid-big", protocol.Slice{MemoryGiB: 8, Cores: 10})
	big.Spec.NodeName = ""
	delete(big.Annotations, protocol.AnnotationAssignment)
	if got, st := schedule(t, p, big, node); st.IsSuccess() {
		t.Fatalf("an 8 GiB pod was placed on %s over the claim's 10 GiB", got)
	}

	cleared := claim.DeepCopy()
	cleared.Status = resourceapi.ResourceClaimStatus{}
	if _, err := cs.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, cleared, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return usedMem() == 0 })
	if _, _, ok := p.ledger.ClaimHolding(claim.UID); ok {
		t.Fatal("a cleared allocation is still recorded")
	}
}

// liveWorld is a plugin fed by informers of a fake clientset holding objs,
// as the scheduler runs it (watch.go, claimwatch.go); stopped with the test.
func liveWorld(t *testing.T, objs ...runtime.Object) (*QGPU, *fake.Clientset) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cs := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(cs, 0)
	pl, err := New(ctx, nil, &fakeHandle{cs: cs, factory: factory})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	return pl.(*QGPU), cs
}
