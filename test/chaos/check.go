package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/internal/view"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

const probeNS = "chaos-probe"

// finish ends a run: it waits for the cluster to settle, prints the pod
// counts and checks (1) the cluster as kubectl qgpu check does, (2) the scheduler's
// ledger against a rebuild: with every pod deleted, one whole-card pod per
// healthy card must bind, or the scheduler still counts a slice of a gone
// pod, (3) the agents' stores: no grant for a gone or terminal pod, and (4)
// no grant the agent refused for a card's capacity: each one is an
// assignment the scheduler made over what the card has, and (5) the
// observer's peak: the most cards over capacity at one moment of the run;
// besides, (6) every bound pod got its grant (diagnoseUngranted), (7)
// every running container was given what its grant says and no card more
// than it has (checkDelivered), (8) no component failed unexpectedly
// (the watchdog), and (9) no claim stays allocated by qGPU for a pod that
// is gone or not bound (checkClaimsReleased), and (10) the DRA nodes
// prepared every running claimed pod's claim as assigned, unprepared the
// others' and hold no card over its memory (checkPrepared). Pods that ask
// through ResourceClaims have no grant: (3), (4) and (6) leave them out,
// (7) compares their containers with their assignments, (1) their
// assignments with their claims.
func (e *env) finish(ctx context.Context) int {
	e.obs.settle(ctx, settleQuiet, settleLimit)
	n := e.diagnoseUngranted(ctx)
	e.printCounts(ctx)
	e.printClaimCounts(ctx)
	n += e.checkRefusals()
	n += e.checkCluster(ctx, "after the faults")
	n += e.checkClaimsReleased(ctx, "after the faults")
	n += e.checkDelivered(ctx)
	n += e.checkPrepared(ctx)
	n += e.probe(ctx)
	n += e.checkCluster(ctx, "after the probe")
	n += e.checkClaimsReleased(ctx, "after the probe")
	n += e.watch.report() // before checkStores stops the nodes
	n += e.checkStores(ctx)
	return n + e.obs.report()
}

// settleQuiet is how long no pod or node may change before the end-state
// checks: longer than the agents' reconcile and health intervals
// (startEnv), so a pass of each has run on the final state. settleLimit
// bounds the wait.
const (
	settleQuiet = 2 * time.Second
	settleLimit = time.Minute
)

func (e *env) printCounts(ctx context.Context) {
	sel := fields.Set{"reason": "FailedScheduling"}.String()
	evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	failed := map[types.UID]bool{}
	if err == nil {
		for _, ev := range evs.Items {
			failed[ev.InvolvedObject.UID] = true
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	resched := 0
	for uid := range failed {
		if e.bound[uid] {
			resched++
		}
	}
	fmt.Printf("pods created %d deleted %d scheduled %d rescheduled %d rejected %d failed-admission %d\n",
		e.created, e.deleted, len(e.bound), resched, len(failed)-resched, len(e.refused))
	byMsg := map[string]int{}
	for _, msg := range e.refused {
		byMsg[admissionKind(msg)]++
	}
	for _, msg := range slices.Sorted(maps.Keys(byMsg)) {
		fmt.Printf("  failed admission (%d): %s\n", byMsg[msg], msg)
	}
}

// admissionKind is a failed admission's message with what differs from
// pod to pod (pod names, card UUIDs, numbers) left out, cut to 240
// characters, so that the run's failed admissions group by cause.
func admissionKind(msg string) string {
	for _, r := range admissionNoise {
		msg = r.re.ReplaceAllString(msg, r.with)
	}
	if len(msg) > 240 {
		msg = msg[:240] + " …"
	}
	return msg
}

var admissionNoise = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`chaos/p-\d+(/\w+)?`), "<pod>"},
	{regexp.MustCompile(`GPU-[0-9a-f-]+`), "<uuid>"},
	{regexp.MustCompile(`\b\d+\b`), "N"},
}

// overCapacity is what the agent's refusal of a grant over a card's
// capacity says (agent/allocate.ErrOverCapacity), as the kubelet reports it
// in the pod's status.
const overCapacity = "grant would oversubscribe a card"

func (e *env) checkRefusals() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	var v []view.Violation
	for uid, msg := range e.refused {
		if strings.Contains(msg, overCapacity) {
			v = append(v, view.Violation{Kind: "OverCapacityAssignment", Object: "pod " + string(uid), Detail: "the agent refused its grant: " + msg})
		}
	}
	// Checked: every bound pod, whose admission the observer watched.
	return report("agent capacity refusals", len(e.bound), v)
}

func (e *env) read(ctx context.Context) (*view.Cluster, error) {
	nodes, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := e.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return view.Build(nodes.Items, pods.Items, 0), nil
}

func (e *env) checkCluster(ctx context.Context, when string) int {
	c, err := e.read(ctx)
	if err != nil {
		fmt.Printf("check %s: reading the cluster: %v\n", when, err)
		return 1
	}
	if s := c.Swapped(); len(s) > 0 {
		fmt.Printf("check %s: %d pods run on a twin's card (identical requests admitted in the other order, card totals right): %v\n", when, len(s), s)
	}
	v := c.Check()
	claims, err := e.claimViolations(ctx, c)
	if err != nil {
		fmt.Printf("check %s: %v\n", when, err)
		return 1
	}
	return report("check "+when, len(c.Pods), append(v, claims...))
}

// report prints a check's violations and its last line, `<what>: checked
// K, N violations`, and returns the number of failures: a check that
// checked nothing fails (NothingChecked), since it could not have found a
// violation.
func report(what string, checked int, v []view.Violation) int {
	if checked == 0 {
		v = append(v, view.Violation{Kind: "NothingChecked", Object: what, Detail: "the check had no case to judge: it proves nothing"})
	}
	for _, x := range v {
		fmt.Printf("  VIOLATION %s\n", x)
	}
	fmt.Printf("%s: checked %d, %d violations\n", what, checked, len(v))
	return len(v)
}

// probe deletes every pod, then asks for every healthy card whole.
func (e *env) probe(ctx context.Context) int {
	zero := int64(0)
	if err := e.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		fmt.Printf("probe: deleting pods: %v\n", err)
		return 1
	}
	if err := e.dropAllClaims(ctx); err != nil {
		fmt.Printf("probe: deleting claims: %v\n", err)
		return 1
	}
	c, err := e.read(ctx)
	if err != nil {
		fmt.Printf("probe: %v\n", err)
		return 1
	}
	cards, claimed, gib := 0, 0, int64(1<<20)
	for _, n := range c.Nodes {
		for _, card := range n.Cards {
			if card.Healthy {
				cards++
				gib = min(gib, card.MemoryGiB)
				if node := e.c.Node(n.Name); node != nil && node.Spec.DRA {
					claimed++
				}
			}
		}
	}
	_, _ = e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probeNS}}, metav1.CreateOptions{})
	// The DRA nodes' cards are asked for through claims, the others'
	// through the extended resources.
	for i := range cards {
		p := builders.GPUPod(fmt.Sprintf("whole-%02d", i)).Namespace(probeNS).General("c", gib, protocol.CoresPerCard).Obj()
		p.UID = ""
		if i < claimed {
			p = claimPod(probeNS, p.Name)
			if _, err := e.cs.ResourceV1().ResourceClaims(probeNS).Create(ctx, probeClaim(p.Name, gib), metav1.CreateOptions{}); err != nil {
				fmt.Printf("probe: %v\n", err)
				return 1
			}
		}
		if _, err := e.cs.CoreV1().Pods(probeNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			fmt.Printf("probe: %v\n", err)
			return 1
		}
	}
	got := 0
	for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if got = countBound(ctx, e, probeNS); got == cards {
			break
		}
	}
	fmt.Printf("probe: %d of %d whole-card pods (%d GiB; %d through claims) bound on emptied cards\n", got, cards, gib, claimed)
	if got < cards {
		fmt.Printf("  VIOLATION LeakedSlice scheduler: %d cards stay taken with every chaos pod deleted\n", cards-got)
		return cards - got
	}
	return 0
}

func countBound(ctx context.Context, e *env, namespace string) int {
	pods, err := e.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// checkStores stops the nodes (and so their agents, which hold the bbolt
// lock) and compares every grant on record with the pods.
func (e *env) checkStores(ctx context.Context) int {
	time.Sleep(3 * time.Second) // > 2 reconcile intervals: records of deleted pods dropped
	var wg sync.WaitGroup
	for _, n := range e.c.Nodes {
		wg.Go(func() { _ = n.Stop() })
	}
	wg.Wait()
	c, err := e.read(ctx)
	if err != nil {
		fmt.Printf("stores: %v\n", err)
		return 1
	}
	var held []view.Held
	for _, n := range e.c.Nodes {
		s, err := store.Open(filepath.Join(n.RootDir, "meta.db"))
		if err != nil {
			fmt.Printf("stores: node %s: %v\n", n.Name, err)
			return 1
		}
		grants, err := s.List()
		_ = s.Close()
		if err != nil {
			fmt.Printf("stores: node %s: %v\n", n.Name, err)
			return 1
		}
		e.printUngrantedRecords(n.Name, grants)
		for _, g := range grants {
			held = append(held, view.Held{Node: n.Name, PodUID: types.UID(g.PodUID), Namespace: g.Namespace, Name: g.Name, Container: g.Container, Resource: g.Resource})
		}
	}
	return report("agent stores (grants)", len(held), c.CheckHeld(held))
}
