package qgpu

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// A binding whose outcome is unknown (its answer lost, the read-back
// failing too) may have been written: the framework's Unreserve after the
// failed Bind must not take back the claim PreBind allocated, or the pod
// runs bound with a slice its claim no longer holds (kubectl qgpu check:
// ClaimMismatch). When the binding was not written, the pod's next cycle,
// once the informer shows it unbound past the binding's version, releases
// the claim as any a dead cycle left allocated.
func TestClaimsKeptThroughUncertainBind(t *testing.T) {
	for _, written := range []bool{true, false} {
		t.Run(map[bool]string{true: "written", false: "not written"}[written], func(t *testing.T) {
			p := draWorld(t, draClaim("u1", protocol.ClassGeneral, "2Gi", "20"))
			p.setNodes(t4Node("n1", 1, false))
			ctx := context.Background()
			pod := draPod("p", "u1")
			pod.ResourceVersion, pod.Annotations = "10", map[string]string{}
			cs := p.handle.ClientSet().(*fake.Clientset)
			if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			state := reservedCycle(t, p, pod, "n1")
			if st := p.PreBind(ctx, state, pod, "n1"); !st.IsSuccess() {
				t.Fatal(st)
			}
			bindFault{err: errInternal, written: written, readErr: errRefusedDial}.inject(t, cs, pod)
			quickReadBack(t)
			if p.Bind(ctx, state, pod, "n1").IsSuccess() {
				t.Fatal("Bind succeeded")
			}
			p.Unreserve(ctx, state, pod, "n1")
			claim := readClaim(t, p, "u1")
			if claim.Status.Allocation == nil || len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].UID != pod.UID {
				t.Fatalf("after an uncertain binding and Unreserve: claim status %+v, want still allocated and reserved for the pod", claim.Status)
			}
			if written {
				return
			}
			// The apiserver answers again (the read fault, prepended last,
			// goes): the stale release asks it whether the pod is bound.
			cs.ReactionChain = cs.ReactionChain[1:]
			if _, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
				t.Fatalf("reading the pod after the fault: %v", err)
			}
			later := pod.DeepCopy()
			later.ResourceVersion = "11"
			p.shared.observePod(ctx, later)
			p.claims = &claimAccess{claims: claimLister(t, claim), classes: p.claims.classes}
			_, st := p.PreFilter(ctx, framework.NewCycleState(), later, nil)
			if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "releasing it") {
				t.Fatalf("next cycle's PreFilter: %v, want the stale allocation released", st)
			}
			released := func(c *resourceapi.ResourceClaim) bool {
				return c.Status.Allocation == nil && len(c.Status.ReservedFor) == 0
			}
			if c := settledClaim(t, p, "u1", released); !released(c) {
				t.Fatalf("after the next cycle: claim status %+v, want released", c.Status)
			}
		})
	}
}

func claimLister(t *testing.T, claims ...any) resourcelisters.ResourceClaimLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, c := range claims {
		if err := idx.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	return resourcelisters.NewResourceClaimLister(idx)
}
