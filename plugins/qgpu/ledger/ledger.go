package ledger

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ErrNoFit is returned by Reserve when the cards no longer have room.
var ErrNoFit = errors.New("the slices no longer fit the node's cards")

// ReasonNotQGPUNode is the Invalid reason of a node without the qGPU label:
// such a node is never eligible (see Eligible).
const ReasonNotQGPUNode = "node is not a qGPU node (label qgpu-device-enable=enable)"

// Node is one node's cards and flags.
type Node struct {
	// Invalid is why the node has no usable cards (no or bad inventory); empty if valid.
	Invalid string
	Mixed   bool
	Cards   []Card
	// Allocatable is the node's allocatable count of each of
	// protocol.Resources, as its Node object says: what the agent's device
	// plugins offer (SetAllocatable).
	Allocatable [len(protocol.Resources)]int64
}

type nodeState struct {
	mu sync.RWMutex
	// info is the node without usage; cards is info plus every holding.
	info []Card
	node Node
	pods map[types.UID]*Holding
	// claims are the DRA claims allocated on the node (claims.go).
	claims map[types.UID]*claimEntry
	known  bool
}

// Ledger is safe for concurrent use. One RWMutex guards the maps; each node
// has its own lock for its cards, and no lock is ever held across two nodes.
// Nodes are never removed from the map (RemoveNode empties one), so a
// *nodeState once found stays the node's.
type Ledger struct {
	mu      sync.RWMutex
	nodes   map[string]*nodeState
	holders map[types.UID]*Holding
	// claimNode is the node of each claim's allocation (claims.go).
	claimNode map[types.UID]string
	// maxPods overrides DefaultMaxPods when > 0.
	maxPods  int
	eligible eligibility
	// watcher is told of every holding recorded or dropped (SetWatcher).
	watcher Watcher
}

// Watcher is told of every change of the holdings, under the ledger's lock
// and in the order of the changes, so that a tally it keeps (the
// per-namespace quota) counts exactly what the ledger holds. Held replaces
// what the pod held before; models[i] is the model of the card of
// h.Slices[i] ("" for a card the node no longer has). A Watcher must not
// call the ledger.
type Watcher interface {
	Held(uid types.UID, h Holding, models []string)
	Released(uid types.UID)
}

// SetWatcher sets the ledger's watcher; call it before the ledger is used.
func (l *Ledger) SetWatcher(w Watcher) { l.watcher = w }

// held tells the watcher of h on the node's cards; the caller holds l.mu
// and the node's lock.
func (l *Ledger) held(uid types.UID, n *nodeState, h *Holding) {
	if l.watcher == nil {
		return
	}
	models := make([]string, len(h.Slices))
	for i, s := range h.Slices {
		if c := cardOf(n.node.Cards, s); c >= 0 {
			models[i] = n.node.Cards[c].Model
		}
	}
	l.watcher.Held(uid, *h.clone(), models)
}

// New returns an empty ledger; maxPodsPerCard ≤ 0 means memory / 4 per card
// (docs/design.md#how-a-card-is-accounted).
func New(maxPodsPerCard int) *Ledger {
	return &Ledger{nodes: map[string]*nodeState{}, holders: map[types.UID]*Holding{}, maxPods: maxPodsPerCard}
}

func (l *Ledger) state(name string, create bool) *nodeState {
	l.mu.RLock()
	n := l.nodes[name]
	l.mu.RUnlock()
	if n != nil || !create {
		return n
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n = l.nodes[name]; n == nil {
		n = &nodeState{pods: map[types.UID]*Holding{}}
		l.nodes[name] = n
	}
	return n
}

// SetNode replaces a node's inventory. inv nil means the node has no usable
// cards, for the reason given. Holdings are kept and re-applied.
func (l *Ledger) SetNode(name string, inv *protocol.Inventory, invalid string, mixed bool) {
	if l.state(name, true).set(inv, invalid, mixed, l.maxPods) {
		l.eligible.flagsChanged()
	}
}

// set replaces the node's inventory and flags and reports whether its
// eligibility (qGPU label, mixed label) changed.
func (n *nodeState) set(inv *protocol.Inventory, invalid string, mixed bool, maxPodsPerCard int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	wasQGPU, wasMixed := n.qgpu(), n.node.Mixed
	n.known = true
	n.info = n.info[:0]
	if inv != nil {
		for _, c := range inv.Cards {
			maxPods := maxPodsPerCard
			if maxPods <= 0 {
				maxPods = DefaultMaxPodsMiB(c.MemoryMiB)
			}
			n.info = append(n.info, Card{Index: c.Index, UUID: c.UUID, Model: c.Model, MemoryGiB: c.MemoryGiB(), Healthy: c.Healthy, MaxPods: maxPods})
		}
	}
	n.node.Invalid, n.node.Mixed = invalid, mixed
	n.recompute()
	return n.qgpu() != wasQGPU || mixed != wasMixed
}

// qgpu reports whether the node is labelled a qGPU node; the caller holds n.mu.
func (n *nodeState) qgpu() bool { return n.known && n.node.Invalid != ReasonNotQGPUNode }

// recompute rebuilds usage from the holdings; the caller holds n.mu.
func (n *nodeState) recompute() {
	n.node.Cards = append(n.node.Cards[:0], n.info...)
	for _, h := range n.pods {
		h.ApplyTo(n.node.Cards, 1)
	}
	n.reapplyClaims()
}

// SetAllocatable records the node's allocatable qGPU resources.
func (l *Ledger) SetAllocatable(name string, alloc [len(protocol.Resources)]int64) {
	n := l.state(name, true)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.node.Allocatable = alloc
}

// RemoveNode forgets a node's cards; its holdings stay until their pods go.
func (l *Ledger) RemoveNode(name string) {
	if n := l.state(name, false); n != nil {
		n.mu.Lock()
		n.known = false
		n.info = n.info[:0]
		n.node = Node{Invalid: "node deleted", Cards: n.node.Cards[:0]}
		n.mu.Unlock()
		l.eligible.flagsChanged()
	}
}

// Reserve chooses and records a pod's slices atomically: choose runs under the
// node's lock on a copy of its cards and returns the slices, which are then
// checked against the rules once more before they are recorded.
func (l *Ledger) Reserve(uid types.UID, node string, class protocol.Class, choose func(Node) ([]protocol.Slice, error)) ([]protocol.Slice, error) {
	return l.ReserveFor(uid, "", node, class, choose)
}

// ReserveFor is Reserve for a pod of the namespace (the holding's Namespace).
func (l *Ledger) ReserveFor(uid types.UID, namespace, node string, class protocol.Class, choose func(Node) ([]protocol.Slice, error)) ([]protocol.Slice, error) {
	n := l.state(node, true)
	n.mu.Lock()
	defer n.mu.Unlock()
	if h := l.holding(uid); h != nil {
		return nil, fmt.Errorf("pod %s already holds slices on node %q", uid, h.Node)
	}
	view := n.node
	view.Cards = append([]Card(nil), n.node.Cards...)
	slices, err := choose(view)
	if err != nil {
		return nil, err
	}
	h := &Holding{Node: node, Class: class, Namespace: namespace, Slices: slices}
	if !h.FitsOn(n.node.Cards) {
		return nil, ErrNoFit
	}
	// The check above ran under this node's lock only: a Reserve or Observe of
	// the same pod on another node may have won since, so record checks again.
	if cur := l.record(uid, n, h.clone()); cur != nil {
		return nil, fmt.Errorf("pod %s already holds slices on node %q", uid, cur.Node)
	}
	return slices, nil
}

// Observe records a holding seen on a bound pod: the informer saw the pod
// bound to h.Node with the scheduler's assignment (the rebuild after a
// restart, or the informer catching up with a bind). What the API says wins
// over what was assumed: an assumed (or bind-uncertain) holding becomes
// bound, with the observed slices, and one assumed on another node moves
// here. A bound holding is never replaced (the first observed assignment
// wins). It reports whether the ledger changed.
func (l *Ledger) Observe(uid types.UID, h Holding) bool {
	changed, _ := l.ObserveChecked(uid, h)
	return changed
}

// ObserveChecked is Observe that also reports the cards the recorded
// holding overbooks. The holding is recorded all the same: the pod is bound
// with it, and accounting less than it holds would let the next pod be
// placed on top. Slices that confirm an assumed holding unchanged were
// checked by Reserve and are not checked again.
func (l *Ledger) ObserveChecked(uid types.UID, h Holding) (bool, []Overbooking) {
	bound := h.clone()
	bound.Bound = true
	// A Reserve of the same pod elsewhere can slip in between dropping an
	// assumed holding and taking this node's lock; the scheduler makes one
	// decision at a time, so a few rounds settle it.
	var over []Overbooking
	for range 8 {
		if cur := l.holding(uid); cur != nil && !cur.Bound && cur.Node != h.Node {
			// Assumed on another node (a bind the scheduler took for failed,
			// then a new decision): the binding the API holds is the truth.
			l.drop(uid, func(c *Holding) bool { return c == cur })
		}
		if changed, settled := l.observeOn(uid, bound, &over); settled {
			return changed, over
		}
	}
	return false, nil
}

// observeOn records or confirms bound on its node unless the pod holds
// slices elsewhere, and sets over to the cards it overbooks; settled is
// false when it found an assumed holding on another node, for Observe to
// drop.
func (l *Ledger) observeOn(uid types.UID, bound *Holding, over *[]Overbooking) (changed, settled bool) {
	n := l.state(bound.Node, true)
	n.mu.Lock()
	defer n.mu.Unlock()
	cur := l.holding(uid)
	switch {
	case cur == nil:
		if testHookObserveRecord != nil {
			testHookObserveRecord(uid)
		}
		if other := l.record(uid, n, bound); other != nil {
			// A Reserve on another node recorded the pod between the
			// check above and record (it holds that node's lock, not
			// this one's): settled only if that holding is bound too;
			// an assumed one is dropped by the next round.
			return false, other.Bound
		}
		*over = overbooked(n.node.Cards, bound)
		return true, true
	case cur.Bound:
		return false, true
	case cur.Node != bound.Node:
		return false, false
	}
	// Assumed or bind-uncertain here: confirm it.
	if !l.swap(uid, n, cur, bound) {
		return false, false
	}
	if cur.Class != bound.Class || !slices.Equal(cur.Slices, bound.Slices) {
		*over = overbooked(n.node.Cards, bound)
	}
	return true, true
}

// testHookObserveRecord, when set by a test, runs in observeOn between its
// check that the pod holds nothing and its record: where a Reserve of the
// pod on another node can slip in.
var testHookObserveRecord func(uid types.UID)

// swap replaces the pod's holding cur on node n with next, unless cur is no
// longer the pod's holding. A holding is swapped, never changed in place,
// as readers copy it outside the node's lock. The caller holds n.mu.
func (l *Ledger) swap(uid types.UID, n *nodeState, cur, next *Holding) bool {
	l.mu.Lock()
	if l.holders[uid] != cur {
		l.mu.Unlock()
		return false
	}
	l.holders[uid] = next
	l.held(uid, n, next)
	l.mu.Unlock()
	n.pods[uid] = next
	cur.ApplyTo(n.node.Cards, -1)
	next.ApplyTo(n.node.Cards, 1)
	return true
}

// record adds h for uid unless the pod already holds slices (on any node),
// in which case it returns that holding and changes nothing. The check and
// the insert are one step under l.mu, so two nodes' locks never both win.
// The caller holds n.mu.
func (l *Ledger) record(uid types.UID, n *nodeState, h *Holding) *Holding {
	l.mu.Lock()
	if cur := l.holders[uid]; cur != nil {
		l.mu.Unlock()
		return cur
	}
	l.holders[uid] = h
	l.held(uid, n, h)
	l.mu.Unlock()
	n.pods[uid] = h
	h.ApplyTo(n.node.Cards, 1)
	l.claimsAfter(n, uid)
	return nil
}

// Release frees what a pod holds, assumed or bound: the pod was deleted or
// has terminated. It is idempotent. With node non-empty it frees only a
// holding on that node.
func (l *Ledger) Release(uid types.UID, node string) bool {
	return l.drop(uid, func(h *Holding) bool { return node == "" || h.Node == node })
}

// Unreserve frees an assumed holding on node (the scheduler's Unreserve): a
// holding the informer already confirmed bound is kept, since the pod does
// hold it whatever the scheduler's bind call returned, and so is one whose
// binding may have been written (Uncertain); a holding on another node is a
// newer decision. It is idempotent.
func (l *Ledger) Unreserve(uid types.UID, node string) bool {
	return l.drop(uid, func(h *Holding) bool { return !h.Bound && !h.Uncertain && h.Node == node })
}

// drop frees the pod's holding if which accepts it.
func (l *Ledger) drop(uid types.UID, which func(*Holding) bool) bool {
	h := l.holding(uid)
	if h == nil || !which(h) {
		return false
	}
	n := l.state(h.Node, false)
	n.mu.Lock()
	defer n.mu.Unlock()
	l.mu.Lock()
	if l.holders[uid] != h {
		l.mu.Unlock()
		return false
	}
	delete(l.holders, uid)
	if l.watcher != nil {
		l.watcher.Released(uid)
	}
	l.mu.Unlock()
	delete(n.pods, uid)
	h.ApplyTo(n.node.Cards, -1)
	l.claimsAfter(n, uid)
	return true
}

// Holding returns a copy of what the pod holds, if anything.
func (l *Ledger) Holding(uid types.UID) (Holding, bool) {
	h := l.holding(uid)
	if h == nil {
		return Holding{}, false
	}
	return *h.clone(), true
}

func (l *Ledger) holding(uid types.UID) *Holding {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.holders[uid]
}
