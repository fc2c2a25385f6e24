package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/agent/dra"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/internal/view"
)

// checkPrepared judges the node side of DRA from the DRA nodes' agents'
// checkpoints (agent/dra: what each node's kubelet had the agent prepare
// and not yet unprepare): every running claimed pod's claim is prepared on
// its node with the slices of the pod's assignment (UnpreparedClaim,
// PreparedMismatch); no claim stays prepared on a node where no live pod
// uses it (StalePrepared: the kubelet unprepares a finished pod's claims,
// through its reconcile loop too); and no card holds more memory in
// prepared claims than it has (OversubscribedPrepared). It waits up to
// staleWait for the kubelets to finish unpreparing, and prints
// `dra claims prepared P checked P`: P the running claimed pods' claims.
func (e *env) checkPrepared(ctx context.Context) int {
	if !e.dra {
		fmt.Println("dra claims prepared: not applicable (no claimed pods in this run)")
		return 0
	}
	capacity, err := e.cardMemory()
	if err != nil {
		fmt.Printf("dra claims prepared: %v\n", err)
		return 1
	}
	var v []view.Violation
	var prepared, checked int
	start := time.Now()
	for {
		v, prepared, checked, err = e.judgePrepared(ctx, capacity)
		if err != nil {
			fmt.Printf("dra claims prepared: %v\n", err)
			return 1
		}
		if len(v) == 0 || time.Since(start) > staleWait || !sleepCtx(ctx, time.Second) {
			break
		}
	}
	fmt.Printf("dra claims prepared %d checked %d (after %v)\n", prepared, checked, time.Since(start).Round(100*time.Millisecond))
	return report("dra claims prepared", checked, v)
}

// judgePrepared is one pass of checkPrepared.
func (e *env) judgePrepared(ctx context.Context, capacity map[string]int64) (v []view.Violation, prepared, checked int, err error) {
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, 0, fmt.Errorf("listing pods: %w", err)
	}
	claims, err := e.cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, 0, fmt.Errorf("listing claims: %w", err)
	}
	byName := map[string]*resourceapi.ResourceClaim{}
	for i := range claims.Items {
		byName[claims.Items[i].Name] = &claims.Items[i]
	}
	for _, n := range e.c.Nodes {
		if !n.Spec.DRA {
			continue
		}
		path := filepath.Join(n.RootDir, "kubelet", "plugins", protocol.DRADriver, dra.DefaultCheckpointName)
		held, err := dra.Checkpoint{Path: path}.Load()
		if err != nil {
			return nil, 0, 0, fmt.Errorf("node %s: %w", n.Name, err)
		}
		used := map[types.UID]bool{} // claims a live pod of the node uses
		for _, p := range pods.Items {
			if p.Spec.NodeName != n.Name || len(p.Spec.ResourceClaims) == 0 || finished(&p) {
				continue
			}
			c := byName[p.Name] // each pod's claim is named after it
			if c != nil {
				used[c.UID] = true
			}
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || c == nil {
				continue
			}
			prepared++
			if x := comparePrepared(&p, c, held); x != nil {
				v = append(v, *x)
				continue
			}
			checked++
		}
		v = append(v, stalePrepared(n.Name, held, used)...)
		v = append(v, oversubscribedPrepared(n.Name, held, capacity)...)
	}
	return v, prepared, checked, nil
}

// finished reports whether a pod's containers have ended for good.
func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// comparePrepared compares a running claimed pod's prepared claim with its
// assignment: the claim prepared, its slices those the scheduler assigned.
func comparePrepared(p *corev1.Pod, c *resourceapi.ResourceClaim, held map[types.UID]dra.Prepared) *view.Violation {
	object := p.Namespace + "/" + p.Name
	prep, ok := held[c.UID]
	if !ok {
		return &view.Violation{Kind: "UnpreparedClaim", Object: object,
			Detail: fmt.Sprintf("running on %s, but its claim %s is not prepared there", p.Spec.NodeName, c.Name)}
	}
	assigned, err := protocol.DecodeAssignment([]byte(p.Annotations[protocol.AnnotationAssignment]))
	if err != nil {
		return &view.Violation{Kind: "PreparedMismatch", Object: object, Detail: "its assignment cannot be read: " + err.Error()}
	}
	var want, got []protocol.Slice
	for _, ca := range assigned.Containers {
		want = append(want, ca.Slices...)
	}
	for _, r := range prep.Requests {
		got = append(got, r.Slices...)
	}
	if !sameSlices(want, got) {
		return &view.Violation{Kind: "PreparedMismatch", Object: object,
			Detail: fmt.Sprintf("its claim %s is prepared with %v, its assignment says %v", c.Name, got, want)}
	}
	return nil
}

// sameSlices compares two lists of slices as sets (a slice assigned to two
// containers of the pod is one slice of the claim).
func sameSlices(a, b []protocol.Slice) bool {
	set := func(l []protocol.Slice) map[protocol.Slice]bool {
		m := map[protocol.Slice]bool{}
		for _, s := range l {
			m[s] = true
		}
		return m
	}
	return maps.Equal(set(a), set(b))
}

// stalePrepared are the claims prepared on node that no live pod of the
// node uses.
func stalePrepared(node string, held map[types.UID]dra.Prepared, used map[types.UID]bool) []view.Violation {
	var v []view.Violation
	for _, uid := range slices.Sorted(maps.Keys(held)) {
		if !used[uid] {
			p := held[uid]
			v = append(v, view.Violation{Kind: "StalePrepared", Object: "node " + node,
				Detail: fmt.Sprintf("claim %s/%s stays prepared with no live pod of the node using it", p.Namespace, p.Name)})
		}
	}
	return v
}

// oversubscribedPrepared are the cards of node whose prepared claims hold
// more memory than the card has.
func oversubscribedPrepared(node string, held map[types.UID]dra.Prepared, capacity map[string]int64) []view.Violation {
	used := map[string]int64{}
	for _, p := range held {
		for _, r := range p.Requests {
			for _, s := range r.Slices {
				used[s.UUID] += s.MemoryGiB
			}
		}
	}
	var v []view.Violation
	for _, uuid := range slices.Sorted(maps.Keys(used)) {
		if c, ok := capacity[uuid]; ok && used[uuid] > c {
			v = append(v, view.Violation{Kind: "OversubscribedPrepared", Object: "card " + uuid + " of " + node,
				Detail: fmt.Sprintf("claims prepared there hold %d GiB of its %d GiB", used[uuid], c)})
		}
	}
	return v
}
