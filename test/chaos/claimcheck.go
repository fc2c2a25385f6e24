package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/internal/view"
)

// staleWait bounds how long checkClaimsReleased waits for the scheduler to
// release claims left allocated for pods it did not bind: a pending pod's
// next cycle releases them (docs/dra.md), and an unschedulable pod is
// retried at least every few seconds while the churn's deletions requeue it.
const staleWait = 60 * time.Second

// staleClaim is a claim that qGPU allocated and that nothing bound holds:
// its pod is gone, not bound, or bound without the claim reserved for it.
type staleClaim struct {
	claim *resourceapi.ResourceClaim
	why   string
}

// staleClaims are the claims of the namespace whose qGPU allocation no
// bound pod holds. A claim's pod is the pod whose spec names it.
func staleClaims(pods []corev1.Pod, claims []resourceapi.ResourceClaim) []staleClaim {
	byClaim := map[string]*corev1.Pod{}
	for i := range pods {
		for _, pc := range pods[i].Spec.ResourceClaims {
			if pc.ResourceClaimName != nil {
				byClaim[pods[i].Namespace+"/"+*pc.ResourceClaimName] = &pods[i]
			}
		}
	}
	var out []staleClaim
	for i := range claims {
		c := &claims[i]
		if !qgpuAllocated(c) {
			continue
		}
		p := byClaim[c.Namespace+"/"+c.Name]
		switch {
		case p == nil:
			out = append(out, staleClaim{c, "its pod is gone"})
		case p.Spec.NodeName == "":
			out = append(out, staleClaim{c, fmt.Sprintf("its pod %s (uid %s) is not bound", p.Name, p.UID)})
		case !slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == p.UID }):
			out = append(out, staleClaim{c, fmt.Sprintf("its pod %s (uid %s) is bound to %s but the claim is not reserved for it", p.Name, p.UID, p.Spec.NodeName)})
		}
	}
	return out
}

// checkClaimsReleased waits up to staleWait for every claim that qGPU
// allocated to be held by its bound pod; each claim still allocated for a
// gone or unbound pod then is a violation (StaleClaim): an allocation the
// scheduler wrote and never bound nor took back.
func (e *env) checkClaimsReleased(ctx context.Context, when string) int {
	if !e.dra {
		fmt.Printf("claims released %s: not applicable (no claimed pods in this run)\n", when)
		return 0
	}
	var stale []staleClaim
	var checked int
	start := time.Now()
	for {
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Printf("claims %s: listing pods: %v\n", when, err)
			return 1
		}
		claims, err := e.cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Printf("claims %s: listing claims: %v\n", when, err)
			return 1
		}
		// The cases: every claim listed; after the probe, also every claim
		// it deleted (each must be gone or released).
		stale, checked = staleClaims(pods.Items, claims.Items), len(claims.Items)+e.dropped
		if len(stale) == 0 || time.Since(start) > staleWait || !sleepCtx(ctx, time.Second) {
			fmt.Printf("claims %s: %d claims, %d allocated for no bound pod after %v\n", when, len(claims.Items), len(stale), time.Since(start).Round(100*time.Millisecond))
			break
		}
	}
	var v []view.Violation
	for _, s := range stale {
		v = append(v, view.Violation{Kind: "StaleClaim", Object: "ResourceClaim " + s.claim.Namespace + "/" + s.claim.Name,
			Detail: fmt.Sprintf("allocated by qGPU (%s), but %s", allocationString(s.claim), s.why)})
	}
	return report("claims released "+when, checked, v)
}

// claimViolations is kubectl qgpu check's comparison of the claimed pods
// with their claims (view.CheckClaims).
func (e *env) claimViolations(ctx context.Context, c *view.Cluster) ([]view.Violation, error) {
	claims, err := e.cs.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing claims: %w", err)
	}
	return c.CheckClaims(claims.Items), nil
}

// printClaimCounts says how many claimed pods the run created and saw
// bound, how many pods' cycles found their claim left allocated by a
// cycle that never bound them (FailedScheduling events that say so), and
// how many releases of claims the scheduler could not write.
func (e *env) printClaimCounts(ctx context.Context) {
	if !e.dra {
		return
	}
	stale := map[types.UID]bool{}
	evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
	if err == nil {
		for _, ev := range evs.Items {
			if strings.Contains(ev.Message, "left it allocated for this pod") {
				stale[ev.InvolvedObject.UID] = true
			}
		}
	}
	released, releasedStale := e.schedulerLogLines(releaseRefused(false)), e.schedulerLogLines(releaseRefused(true))
	e.mu.Lock()
	defer e.mu.Unlock()
	bound := 0
	for uid := range e.claimed {
		if e.bound[uid] {
			bound++
		}
	}
	fmt.Printf("claimed pods (DRA) created %d scheduled %d; pods whose cycle found their claim left allocated by an earlier one %d; "+
		"claim releases refused: after a failed binding %d, of an earlier cycle's allocation %d\n",
		len(e.claimed), bound, len(stale), released, releasedStale)
}

// releaseRefused matches the scheduler's log lines (at every verbosity)
// for a claim's allocation it could not take back: after a failed binding
// (Unreserve; stale says: an allocation an earlier cycle left, in the
// pod's next PreFilter). A claim being deleted, or gone, is no refusal:
// whoever deletes it deallocates it.
func releaseRefused(stale bool) func(string) bool {
	what := "Releasing a qGPU claim after a failed binding"
	if stale {
		what = "Releasing a qGPU claim a dead cycle left allocated"
	}
	return func(l string) bool {
		return strings.Contains(l, what) && !strings.Contains(l, "is being deleted") && !strings.Contains(l, "not found")
	}
}

// schedulerLogLines counts the lines of the run's scheduler logs that
// match.
func (e *env) schedulerLogLines(match func(line string) bool) int {
	logs := map[string]bool{}
	for _, sched := range e.schedulersEver() {
		logs[sched.LogPath] = true
	}
	n := 0
	for path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if match(l) {
				n++
			}
		}
	}
	return n
}
