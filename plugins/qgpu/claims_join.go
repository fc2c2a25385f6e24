package qgpu

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Shared claims (docs/dra.md#shared-claims): a pod whose qGPU claims were
// allocated by another pod's cycle (a Deployment's replicas naming one
// ResourceClaim) joins them, as upstream's DynamicResources does: it goes to
// the allocation's node, PreBind adds it to each claim's reservedFor, and
// it holds nothing in the ledger itself. The slice is the claim's, counted
// once (ledger/claims.go), and the node prepares it once. Such a pod binds
// without an assignment (DefaultBinder): its slice is its claims'.

// joinPlan is a joining cycle's node and claims.
type joinPlan struct {
	node   string
	claims []request.SharedClaim
	// joined: PreBind began adding the pod to the claims, so Unreserve
	// takes it out again.
	joined bool
}

// joinCycle starts the cycle of a pod that joins shared claims: only their
// node, and none if they were allocated on different nodes.
func (p *QGPU) joinCycle(cs fwk.CycleState, req *request.Request) (*fwk.PreFilterResult, *fwk.Status) {
	nodes := sets.New[string]()
	for _, c := range req.Shared {
		nodes.Insert(c.Node)
	}
	if nodes.Len() != 1 {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
			"the pod's shared ResourceClaims are allocated on different nodes (%s): no node has them all", strings.Join(sets.List(nodes), ", ")))
	}
	node := req.Shared[0].Node
	cs.Write(stateKey, &cycleState{req: req, join: &joinPlan{node: node, claims: req.Shared}})
	return &fwk.PreFilterResult{NodeNames: nodes}, nil
}

// filterJoin admits only the claims' node (PreFilter already narrowed the
// cycle to it; preemption's dry runs may offer others).
func filterJoin(j *joinPlan, node string) *fwk.Status {
	if node != j.node {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "the pod's shared ResourceClaims are allocated on node "+j.node)
	}
	return nil
}

// joinClaims adds the pod to each shared claim's reservedFor, as long as the
// claim still has the allocation PreFilter saw.
func (p *QGPU) joinClaims(ctx context.Context, j *joinPlan, pod *v1.Pod) error {
	j.joined = true
	for _, c := range j.claims {
		_, err := p.writeClaim(ctx, c.Ref, func(claim *resourceapi.ResourceClaim) error {
			if !sharedAs(c.Share)(claim) {
				return fmt.Errorf("claim %s/%s: its allocation changed since the pod's cycle began", c.Ref.Namespace, c.Ref.Name)
			}
			if slices.ContainsFunc(claim.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod.UID }) {
				return errNothingToDo
			}
			if len(claim.Status.ReservedFor) >= resourceapi.ResourceClaimReservedForMaxSize {
				return fmt.Errorf("claim %s/%s is reserved for %d pods, the most a claim takes", c.Ref.Namespace, c.Ref.Name, len(claim.Status.ReservedFor))
			}
			claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
			return nil
		})
		if err != nil && err != errNothingToDo {
			return err
		}
	}
	return nil
}

// leaveClaims takes the pod out of the claims it joined (Unreserve); the
// allocation stays, the other consumers' or the resource-claim
// controller's to end.
func (p *QGPU) leaveClaims(ctx context.Context, j *joinPlan, pod *v1.Pod) {
	for _, c := range j.claims {
		_, err := p.writeClaim(ctx, c.Ref, func(claim *resourceapi.ResourceClaim) error {
			n := len(claim.Status.ReservedFor)
			claim.Status.ReservedFor = slices.DeleteFunc(claim.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod.UID })
			if len(claim.Status.ReservedFor) == n {
				return errNothingToDo
			}
			return nil
		})
		if err != nil && err != errNothingToDo {
			klog.FromContext(ctx).Error(err, "Leaving a shared qGPU claim after a failed binding", "pod", klog.KObj(pod), "claim", klog.KRef(c.Ref.Namespace, c.Ref.Name))
		}
	}
}
