package qgpu

import (
	"context"
	"strings"
	"testing"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestClaimsShared: pods b and c name the claim pod a's cycle allocated (a
// Deployment's replicas sharing one ResourceClaim). They are not held back
// until a's release (eebf961: "ResourceClaim shared is allocated: waiting
// for its release"): each goes to the allocation's node and no other,
// joins the claim's reservedFor, holds nothing of its own in the ledger
// (the card counts the slice once), and binds without an assignment. A
// failed binding takes the pod out of reservedFor and leaves the
// allocation.
func TestClaimsShared(t *testing.T) {
	p := draWorld(t, draClaim("shared", protocol.ClassGeneral, "6Gi", "30"))
	n1, n2 := t4Node("n1", 1, false), t4Node("n2", 1, false)
	p.setNodes(n1, n2)
	ctx := context.Background()
	a := draPod("a", "shared")
	got, st := schedule(t, p, a, n1)
	if !st.IsSuccess() || got != "n1" {
		t.Fatalf("a: %v %v", got, st)
	}
	allocated := readClaim(t, p, "shared")
	share := *allocated.Status.Allocation.Devices.Results[0].ShareID
	p.claims.claims = claimLister(t, allocated)
	used := func() int64 { n, _ := p.ledger.CopyNode("n1", nil); return n.Cards[0].UsedMemoryGiB }

	for _, name := range []string{"b", "c"} {
		pod := draPod(name, "shared")
		got, st := schedule(t, p, pod, n2, n1)
		if !st.IsSuccess() || got != "n1" {
			t.Fatalf("%s: placed on %q (%v), want n1, the claim's node", name, got, st)
		}
		if _, ok := p.ledger.Holding(pod.UID); ok {
			t.Errorf("%s holds slices of its own", name)
		}
		if u := used(); u != 6 {
			t.Errorf("after %s joined: card 0 of n1 holds %d GiB, want the claim's 6 once", name, u)
		}
	}
	c := readClaim(t, p, "shared")
	if len(c.Status.ReservedFor) != 3 || *c.Status.Allocation.Devices.Results[0].ShareID != share {
		t.Fatalf("claim after two joined: reservedFor %+v, allocation %+v", c.Status.ReservedFor, c.Status.Allocation)
	}

	// A joining cycle binds through DefaultBinder, and a failed one leaves.
	d := draPod("d", "shared")
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs, d, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, cs, d, nodeInfo(n2)); st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "allocated on node n1") {
		t.Errorf("Filter on n2: %v", st)
	}
	if st := p.Reserve(ctx, cs, d, "n1"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.PreBind(ctx, cs, d, "n1"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Bind(ctx, cs, d, "n1"); st.Code() != fwk.Skip {
		t.Errorf("Bind of a joining pod: %v, want Skip (DefaultBinder binds it without an assignment)", st)
	}
	p.Unreserve(ctx, cs, d, "n1")
	c = readClaim(t, p, "shared")
	if len(c.Status.ReservedFor) != 3 || c.Status.Allocation == nil {
		t.Errorf("after d's Unreserve: reservedFor %+v, allocation kept %v; want a, b, c and the allocation", c.Status.ReservedFor, c.Status.Allocation != nil)
	}
	for _, r := range c.Status.ReservedFor {
		if r.UID == d.UID {
			t.Errorf("d still reserved: %+v", c.Status.ReservedFor)
		}
	}
}
