package main

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/qgpu-scheduler/qgpu/agent/nvml/fakespec"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/internal/view"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// observer watches the run from the start with its own client and
// informers, so that the check covers every instant of the run and not only
// the pods still alive at its end. It does not trust the agents'
// inventories: a node's cards are the ones the harness gave its fake NVML
// (the node spec), whatever the agent publishes or a fault rewrites. On
// every pod change it recomputes the cards of the node the pod is (or was)
// bound to, with the checker's capacity rules, by the scheduler's
// assignments and by the agents' grants, and keeps the peak number of
// cards that were over capacity at the same moment.
//
// One moment is one state of the pod watch: the apiserver delivers the
// pod changes of a watch in resourceVersion order, so every state the
// observer evaluates existed. A relist after a broken watch (an apiserver
// restart) does not: the informer replays its differences one by one,
// additions before deletions, so for a while after a watch error
// (relistWindow) an instant over capacity is only noted as unconfirmed,
// and the nodes are judged again once the window ends.
type observer struct {
	cards map[string]corev1.Node // node → a Node object made from its spec

	mu    sync.Mutex
	pods  map[string]map[types.UID]*corev1.Pod // node → bound qGPU pods
	over  map[string]int                       // node → cards over capacity now
	now   int                                  // sum of over
	peak  int
	shown []string // the first instants over capacity
	// dumped are the nodes whose pods were listed at their first instant
	// over capacity (podTable), so a run's log says what held the card.
	dumped map[string]bool
	events int
	last   time.Time // the last pod or node change
	// unsureUntil ends the current relist window; unconfirmed counts the
	// instants over capacity seen inside one, watchErrors the windows.
	unsureUntil time.Time
	unconfirmed int
	watchErrors int
	// claims compares the claimed pods with their claims (observeclaims.go).
	claims claimWatch
}

// relistWindow is how long after a watch error the observer does not
// trust an instant: longer than an informer needs to relist a run's pods.
const relistWindow = 5 * time.Second

const maxShown = 10

// newObserver makes the observer's nodes from the harness's node specs.
func newObserver(specs []harness.NodeSpec) (*observer, error) {
	o := &observer{cards: map[string]corev1.Node{}, pods: map[string]map[types.UID]*corev1.Pod{}, over: map[string]int{}, dumped: map[string]bool{}}
	for _, s := range specs {
		n, err := specNode(s)
		if err != nil {
			return nil, err
		}
		o.cards[s.Name] = n
	}
	return o, nil
}

// specNode is the Node the checker reads for a node spec: qGPU and mixed
// labels as the spec says, and an inventory of its fake cards, all healthy
// (a card turned unhealthy still holds its pods).
func specNode(s harness.NodeSpec) (corev1.Node, error) {
	fake, err := fakespec.Parse(s.Cards)
	if err != nil {
		return corev1.Node{}, fmt.Errorf("node %s: %w", s.Name, err)
	}
	inv := protocol.Inventory{Version: protocol.InventoryVersion}
	for i, c := range fake {
		inv.Cards = append(inv.Cards, protocol.Card{Index: i, UUID: fakespec.UUID(s.Name, i), Model: c.Model, MemoryMiB: c.MemoryMiB, Healthy: true})
	}
	raw, err := inv.Encode()
	if err != nil {
		return corev1.Node{}, fmt.Errorf("node %s: %w", s.Name, err)
	}
	labels := map[string]string{protocol.LabelDeviceEnable: protocol.LabelValueEnable}
	if s.Mixed {
		labels[protocol.LabelMixedEnable] = protocol.LabelValueEnable
	}
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Labels: labels, Annotations: map[string]string{protocol.AnnotationInventory: raw}}}, nil
}

// start runs the observer's informers until ctx ends and waits for their
// first list.
func (o *observer) start(ctx context.Context, cs kubernetes.Interface) error {
	f := informers.NewSharedInformerFactory(cs, 0)
	pods, nodes := f.Core().V1().Pods().Informer(), f.Core().V1().Nodes().Informer()
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.podChanged(nil, obj) },
		UpdateFunc: o.podChanged,
		DeleteFunc: func(obj any) { o.podChanged(obj, nil) },
	})
	_ = pods.SetWatchErrorHandler(func(*cache.Reflector, error) {
		o.mu.Lock()
		o.watchErrors++
		o.mu.Unlock()
		o.distrust(relistWindow)
	})
	touch := func(any) { o.touch() }
	_, _ = nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: touch, UpdateFunc: func(_, n any) { touch(n) }, DeleteFunc: touch})
	o.watchClaims(f)
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced, o.claims.synced) {
		return fmt.Errorf("observer: informers did not sync")
	}
	go o.sweepClaims(ctx)
	return nil
}

func (o *observer) touch() {
	o.mu.Lock()
	o.events++
	o.last = time.Now()
	o.mu.Unlock()
}

// podChanged moves a pod between the per-node sets (nil old: added, nil
// obj: deleted) and re-evaluates the nodes it left and entered.
func (o *observer) podChanged(old, obj any) {
	before, _ := tombstone(old)
	after, _ := tombstone(obj)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events++
	o.last = time.Now()
	touched := map[string]bool{}
	if before != nil && before.Spec.NodeName != "" {
		delete(o.pods[before.Spec.NodeName], before.UID)
		touched[before.Spec.NodeName] = true
	}
	if after != nil && after.Spec.NodeName != "" && holds(after) {
		if o.pods[after.Spec.NodeName] == nil {
			o.pods[after.Spec.NodeName] = map[types.UID]*corev1.Pod{}
		}
		o.pods[after.Spec.NodeName][after.UID] = after
		touched[after.Spec.NodeName] = true
	}
	for node := range touched {
		o.evaluate(node)
	}
}

func tombstone(obj any) (*corev1.Pod, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	return p, ok
}

// holds reports whether a bound pod can hold card slices: qGPU annotations
// of the scheduler or the agent, and not terminal. A pod being deleted
// still runs until it is gone, so it holds.
func holds(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	_, a := p.Annotations[protocol.AnnotationAssignment]
	_, g := p.Annotations[protocol.AnnotationGrant]
	return a || g
}

// evaluate checks one node's cards with its current pods; o.mu is held.
func (o *observer) evaluate(node string) {
	n, ok := o.cards[node]
	if !ok {
		return // not a qGPU node of the run
	}
	pods := make([]corev1.Pod, 0, len(o.pods[node]))
	for _, p := range o.pods[node] {
		pods = append(pods, *p)
	}
	over, details := cardsOver(n, pods)
	o.now += over - o.over[node]
	o.over[node] = over
	if time.Now().Before(o.unsureUntil) {
		if over > 0 {
			o.unconfirmed++
		}
		return
	}
	if over > 0 && len(o.shown) < maxShown {
		o.shown = append(o.shown, fmt.Sprintf("%s %d cards of %s: %v", time.Now().Format("15:04:05.000"), over, node, details))
		if !o.dumped[node] {
			o.dumped[node] = true
			o.shown = append(o.shown, podTable(pods)...)
		}
	}
	o.peak = max(o.peak, o.now)
}

// distrust opens (or extends) a window of d in which instants are not
// trusted, and judges every node again when it ends.
func (o *observer) distrust(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if until := time.Now().Add(d); until.After(o.unsureUntil) {
		o.unsureUntil = until
	}
	time.AfterFunc(d+10*time.Millisecond, o.confirm)
}

// confirm judges every node with the state after a relist window.
func (o *observer) confirm() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if time.Now().Before(o.unsureUntil) {
		return // extended: a later confirm runs
	}
	for node := range o.cards {
		o.evaluate(node)
	}
}

// podTable is one line per pod of a node: name, UID, phase, whether it is
// being deleted, its assignment and its grant, sorted by name.
func podTable(pods []corev1.Pod) []string {
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		deleting := ""
		if p.DeletionTimestamp != nil {
			deleting = " deleting"
		}
		out = append(out, fmt.Sprintf("    %s uid %s %s%s assigned [%s] granted [%s]", p.Name, p.UID, p.Status.Phase, deleting,
			slicesOf(p.Annotations[protocol.AnnotationAssignment]), slicesOf(p.Annotations[protocol.AnnotationGrant])))
	}
	return out
}

// slicesOf is an assignment annotation in one line (class, then per
// container its cards, GiB and cores), or what is wrong with it.
func slicesOf(value string) string {
	if value == "" {
		return "none"
	}
	a, err := protocol.DecodeAssignment([]byte(value))
	if err != nil {
		return "undecodable: " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s uid %s", a.Class, a.PodUID)
	for _, c := range a.Containers {
		fmt.Fprintf(&b, "; %s:", c.Name)
		for _, s := range c.Slices {
			fmt.Fprintf(&b, " card%d %dGiB %dc", s.Index, s.MemoryGiB, s.Cores)
		}
	}
	return b.String()
}

// cardsOver counts the cards of n that pods take past their capacity with
// the checker's rules (internal/view): once by the scheduler's assignments
// and once by the agents' grants. By grants, a pod without one has no
// container on a card yet and holds nothing, except a pod that asks
// through ResourceClaims, which no agent grants here: it holds its
// assignment, which its claims must agree with (observeclaims.go). (The checker's end-state view
// counts such a pod at its assignment instead; while the kubelet admits two
// identical pods out of order, that counts one card for both twins for a
// moment, which no container ever saw.)
func cardsOver(n corev1.Node, pods []corev1.Pod) (int, []string) {
	cards := map[string]bool{}
	var details []string
	judge := func(by string, pods []corev1.Pod) {
		for _, v := range view.Build([]corev1.Node{n}, pods, 0).Check() {
			if v.Kind == "Oversubscribed" {
				cards[v.Object] = true
				details = append(details, "by "+by+": "+v.String())
			}
		}
	}
	judge("assignments", rewrite(pods, func(p *corev1.Pod) bool {
		delete(p.Annotations, protocol.AnnotationGrant)
		return true
	}))
	judge("grants", rewrite(pods, func(p *corev1.Pod) bool {
		g, ok := p.Annotations[protocol.AnnotationGrant]
		if !ok {
			return request.UsesClaims(p)
		}
		p.Annotations[protocol.AnnotationAssignment] = g
		return true
	}))
	sort.Strings(details)
	return len(cards), details
}

// rewrite copies the pods that keep accepts, each with its own copy of
// the annotations for keep to change.
func rewrite(pods []corev1.Pod, keep func(*corev1.Pod) bool) []corev1.Pod {
	out := make([]corev1.Pod, 0, len(pods))
	for _, p := range pods {
		p.Annotations = maps.Clone(p.Annotations)
		if keep(&p) {
			out = append(out, p)
		}
	}
	return out
}

// settle waits until the cluster is quiet: no pod or node changed for
// quiet and every bound pod that holds slices has the agent's grant (its
// admission finished). It gives up after limit and says why.
func (o *observer) settle(ctx context.Context, quiet, limit time.Duration) {
	start := time.Now()
	for ctx.Err() == nil {
		o.mu.Lock()
		idle, waiting := time.Since(o.last), o.ungranted()
		o.mu.Unlock()
		if idle >= quiet && waiting == 0 {
			fmt.Printf("settled after %v (quiet for %v, every bound pod granted but the claimed ones)\n", time.Since(start).Round(100*time.Millisecond), quiet)
			return
		}
		if time.Since(start) > limit {
			fmt.Printf("not settled after %v: last change %v ago, %d bound pods without a grant; checking anyway\n", limit, idle.Round(100*time.Millisecond), waiting)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (o *observer) ungranted() int { return len(o.ungrantedLocked()) }

// ungrantedPods are the bound pods that hold slices without a grant,
// but for those that ask through ResourceClaims: no agent grants them here
// (the node side of DRA does not run in chaos, claims.go).
func (o *observer) ungrantedPods() []*corev1.Pod {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ungrantedLocked()
}

func (o *observer) ungrantedLocked() []*corev1.Pod {
	var out []*corev1.Pod
	for _, pods := range o.pods {
		for _, p := range pods {
			if _, ok := p.Annotations[protocol.AnnotationGrant]; !ok && !request.UsesClaims(p) {
				out = append(out, p)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// report prints the peak and the first instants over capacity; the peak
// counts as violations.
func (o *observer) report() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Printf("observer: %d pod and node changes seen\n", o.events)
	if o.watchErrors > 0 {
		fmt.Printf("observer: %d watch errors; %d instants over capacity while relisting not counted (every node judged again after)\n", o.watchErrors, o.unconfirmed)
	}
	for _, s := range o.shown {
		if strings.HasPrefix(s, "    ") {
			fmt.Println(s) // a pod of the node just above
			continue
		}
		fmt.Printf("  VIOLATION over capacity at %s\n", s)
	}
	n := o.reportClaims()
	fmt.Printf("peak-oversubscribed %d\n", o.peak)
	return o.peak + n
}
