package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/qgpu-scheduler/qgpu/internal/view"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// claimWatch is the observer's part for pods that ask through
// ResourceClaims: every claimSweep during the run it compares each bound
// claimed pod with its claims as kubectl qgpu check does
// (view.CheckClaims). The pods and the claims come from two watches, which
// can be apart by a moment (a pod seen bound before its claim's
// allocation, a claim released before the pod's deletion is seen), so a
// disagreement counts only when it lasts claimPersist: the scheduler
// writes the claims before it binds, and chaos deletes a pod before its
// claim, so a real one does not heal by itself.
type claimWatch struct {
	lister resourcelisters.ResourceClaimLister
	synced cache.InformerSynced
	since  map[string]time.Time // disagreement → first seen
	bad    []string             // disagreements that lasted, as reported
	listed map[string]bool      // the disagreements in bad
	sweeps int                  // sweeps that compared at least one pod
}

const (
	claimSweep   = time.Second
	claimPersist = 3 * time.Second
)

// watchClaims adds the claim informer to f; sweepClaims runs once f started.
func (o *observer) watchClaims(f informers.SharedInformerFactory) {
	inf := f.Resource().V1().ResourceClaims()
	o.claims = claimWatch{lister: inf.Lister(), synced: inf.Informer().HasSynced,
		since: map[string]time.Time{}, listed: map[string]bool{}}
}

// sweepClaims compares the claimed pods with their claims every claimSweep
// until ctx ends.
func (o *observer) sweepClaims(ctx context.Context) {
	t := time.NewTicker(claimSweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			claims, err := o.claims.lister.List(labels.Everything())
			if err != nil {
				continue
			}
			o.mu.Lock()
			o.compareClaims(now, claims)
			o.mu.Unlock()
		}
	}
}

// compareClaims is one sweep; o.mu is held. Sweeps inside a relist window
// (after a watch error) are skipped, as the card checks there are.
func (o *observer) compareClaims(now time.Time, claims []*resourceapi.ResourceClaim) {
	if now.Before(o.unsureUntil) {
		return
	}
	var pods []corev1.Pod
	for _, ps := range o.pods {
		for _, p := range ps {
			if request.UsesClaims(p) {
				pods = append(pods, *p)
			}
		}
	}
	if len(pods) == 0 {
		clear(o.claims.since)
		return
	}
	o.claims.sweeps++
	nodes := make([]corev1.Node, 0, len(o.cards))
	for _, n := range o.cards {
		nodes = append(nodes, n)
	}
	list := make([]resourceapi.ResourceClaim, len(claims))
	for i, c := range claims {
		list[i] = *c
	}
	seen := map[string]time.Time{}
	for _, v := range view.Build(nodes, pods, 0).CheckClaims(list) {
		k := v.String()
		first, ok := o.claims.since[k]
		if !ok {
			first = now
		}
		seen[k] = first
		if now.Sub(first) >= claimPersist && !o.claims.listed[k] {
			o.claims.listed[k] = true
			o.claims.bad = append(o.claims.bad, fmt.Sprintf("%s (from %s)", k, first.Format("15:04:05.000")))
		}
	}
	o.claims.since = seen
}

// reportClaims prints the disagreements that lasted; each is a violation.
// o.mu is held.
func (o *observer) reportClaims() int {
	fmt.Printf("observer: claimed pods compared with their claims in %d sweeps, %d disagreements lasting %v or more\n", o.claims.sweeps, len(o.claims.bad), claimPersist)
	for _, b := range o.claims.bad {
		fmt.Printf("  VIOLATION %s\n", b)
	}
	return len(o.claims.bad)
}
