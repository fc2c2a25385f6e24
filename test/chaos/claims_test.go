package main

import (
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/agent/nvml/fakespec"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// claimedOn is a claimed general pod bound to node with its assignment
// (gib, cores on card), and its claim allocated as the scheduler writes
// it, reserved for the pod; node "" leaves both unbound and unallocated.
func claimedOn(t *testing.T, name, node string, gib, cores int64, card int) (*corev1.Pod, *resourceapi.ResourceClaim) {
	t.Helper()
	e := &env{rng: rand.New(rand.NewSource(1))}
	p, _ := e.claimedPod(0)
	p.Name, p.UID = name, types.UID("uid-"+name)
	*p.Spec.ResourceClaims[0].ResourceClaimName = name
	c := newClaim(name, protocol.ClassGeneral, gib, cores)
	c.UID = types.UID("claim-" + name)
	if node == "" {
		return p, c
	}
	p.Spec.NodeName = node
	a := protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(p.UID), Node: node, Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{{Index: card, UUID: fakespec.UUID(node, card), MemoryGiB: gib, Cores: cores}}}}}
	p.Annotations = map[string]string{}
	p.Annotations[protocol.AnnotationAssignment], _ = a.Encode()
	allocate(c, node, card, gib, cores)
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
	return p, c
}

func allocate(c *resourceapi.ResourceClaim, node string, card int, gib, cores int64) {
	share := c.UID
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: protocol.DRADriver, Pool: node, Device: protocol.DRADeviceName(card), ShareID: &share,
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
			protocol.DRACapacityMemory: *resource.NewQuantity(gib<<30, resource.BinarySI),
			protocol.DRACapacityCores:  *resource.NewQuantity(cores, resource.DecimalSI),
		}}}}}
}

// The random claimed pods parse as qGPU claims of the shapes the other
// random pods have, one container using the one claim.
func TestClaimedPodsParse(t *testing.T) {
	e := &env{rng: rand.New(rand.NewSource(7))}
	classes := map[protocol.Class]int{}
	for i := range 200 {
		p, c := e.claimedPod(i)
		c.UID = types.UID("u")
		req, err := request.ParseClaims(p, func(string, string) (*resourceapi.ResourceClaim, error) { return c, nil })
		if err != nil || req == nil || len(req.Claims) != 1 {
			t.Fatalf("pod %d: request %+v, error %v", i, req, err)
		}
		classes[req.Class]++
		if mem := req.Containers[0].MemoryGiB; mem < 1 || mem > 8 {
			t.Errorf("pod %d: %d GiB", i, mem)
		}
	}
	if len(classes) != 3 {
		t.Errorf("classes drawn: %v, want all three", classes)
	}
}

// staleClaims names the qGPU allocations no bound pod holds: a pod gone,
// not bound, or bound without the claim reserved for it; an unallocated
// claim and a bound pod's claim are fine.
func TestStaleClaims(t *testing.T) {
	bound, boundClaim := claimedOn(t, "bound", "t4", 2, 10, 0)
	pending, pendingClaim := claimedOn(t, "pending", "", 2, 10, 0)
	_, left := claimedOn(t, "left", "", 2, 10, 0)
	allocate(left, "t4", 1, 2, 10) // a dead cycle's allocation
	_, goneClaim := claimedOn(t, "gone", "t4", 2, 10, 1)
	other, otherClaim := claimedOn(t, "other", "t4", 2, 10, 1)
	otherClaim.Status.ReservedFor[0].UID = "someone-else"
	leftPod := pending.DeepCopy()
	leftPod.Name, leftPod.UID = "left", "uid-left"
	*leftPod.Spec.ResourceClaims[0].ResourceClaimName = "left"
	pods := []corev1.Pod{*bound, *pending, *leftPod, *other}
	claims := []resourceapi.ResourceClaim{*boundClaim, *pendingClaim, *left, *goneClaim, *otherClaim}
	var got []string
	for _, s := range staleClaims(pods, claims) {
		got = append(got, s.claim.Name+": "+s.why)
	}
	want := []string{
		"left: its pod left (uid uid-left) is not bound",
		"gone: its pod is gone",
		"other: its pod other (uid uid-other) is bound to t4 but the claim is not reserved for it",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stale claims (-want +got):\n%s", d)
	}
}

// The observer counts a claimed pod's disagreement with its claim only
// when it lasts claimPersist (the two watches may be a moment apart), once.
func TestObserverClaimsPersist(t *testing.T) {
	o, err := newObserver([]harness.NodeSpec{{Name: "t4", Cards: "2xT4"}})
	if err != nil {
		t.Fatal(err)
	}
	o.claims = claimWatch{since: map[string]time.Time{}, listed: map[string]bool{}}
	p, c := claimedOn(t, "a", "t4", 2, 10, 0)
	o.podChanged(nil, p)
	released := c.DeepCopy()
	released.Status.Allocation, released.Status.ReservedFor = nil, nil
	t0 := time.Now()
	steps := []struct {
		after time.Duration
		claim *resourceapi.ResourceClaim
		bad   int
	}{
		{0, c, 0},
		{time.Second, released, 0},     // the claim watch ahead of the pod watch
		{2 * time.Second, c, 0},        // healed
		{3 * time.Second, released, 0}, // released under the bound pod
		{5 * time.Second, released, 0},
		{6 * time.Second, released, 1}, // lasted claimPersist
		{9 * time.Second, released, 1}, // counted once
	}
	for _, s := range steps {
		o.compareClaims(t0.Add(s.after), []*resourceapi.ResourceClaim{s.claim})
		if len(o.claims.bad) != s.bad {
			t.Fatalf("after %v: %d disagreements counted %v, want %d", s.after, len(o.claims.bad), o.claims.bad, s.bad)
		}
	}
	if !strings.Contains(o.claims.bad[0], "ClaimMismatch chaos/a") {
		t.Errorf("counted %q", o.claims.bad[0])
	}
}

// A claimed pod is never waited for as ungranted (no agent grants it
// here), and it holds its assignment when the observer judges the cards
// by grants: a granted pod over the card with it is caught.
func TestObserverClaimedPods(t *testing.T) {
	o, err := newObserver([]harness.NodeSpec{{Name: "t4", Cards: "1xT4"}})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := claimedOn(t, "a", "t4", 10, 30, 0)
	o.podChanged(nil, p)
	if u := o.ungrantedPods(); len(u) != 0 {
		t.Errorf("ungranted: %v, want none", u)
	}
	o.podChanged(nil, placed("b", "t4", 10, 30, 0, 0)) // 20 GiB on a 15 GiB card
	if o.now != 1 {
		t.Errorf("cards over capacity: %d, want 1", o.now)
	}
	over, details := cardsOver(o.cards["t4"], []corev1.Pod{*p, *placed("b", "t4", 10, 30, 0, 0)})
	if over != 1 || !strings.Contains(strings.Join(details, " "), "by grants") {
		t.Errorf("cardsOver: %d %v, want the card over by grants too", over, details)
	}
}
