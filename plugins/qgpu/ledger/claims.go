package ledger

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// Claims: the slices a DRA ResourceClaim's allocation holds
// (docs/ledger.md#claims). A claim allocated on a node holds its slices
// from the allocation until the allocation is cleared, whoever consumes it:
// the pod it was allocated for, a pod that joined it later (a pod created
// with spec.nodeName, which no scheduler sees), or none while the
// resource-claim controller has not yet cleared it.
//
// The pod the scheduler placed with the claim holds the same slices in its
// own holding (Reserve, Observe), and a card must count them once. So a
// claim's entry is covered while any pod among its consumers holds slices
// on the claim's node, and adds nothing then; once the last such holding
// goes (the pod deleted or terminated, its binding undone), the entry
// counts the slices itself until ReleaseClaim. Coverage is settled under
// the node's lock whenever a pod's holding on the node is recorded or
// dropped, so the card's usage never shows the slices twice or not at all.
//
// A claim's entry takes part in the Watcher's tally under the claim's UID
// while it is uncovered, like a pod's holding.

// claimEntry is one claim's allocation on a node.
type claimEntry struct {
	uid types.UID
	// h is the allocation: Node, Class, Namespace and the slices, whose UUID
	// may be empty (an allocation names the card by index).
	h         *Holding
	consumers []types.UID
	// applied is what the entry adds to the node's cards now: h with the
	// UUID of the card at each slice's index when it was applied; nil while
	// a consumer's holding covers it.
	applied *Holding
}

// SetClaim records or updates a claim's allocation on h.Node, consumed by
// consumers (the pods its status reserves it for). An allocation moved to
// another node leaves the old one. It reports whether the claim's entry
// changed.
func (l *Ledger) SetClaim(uid types.UID, h Holding, consumers []types.UID) bool {
	l.mu.Lock()
	if l.claimNode == nil {
		l.claimNode = map[types.UID]string{}
	}
	old, had := l.claimNode[uid]
	l.claimNode[uid] = h.Node
	l.mu.Unlock()
	if had && old != h.Node {
		l.dropClaim(uid, old)
	}
	n := l.state(h.Node, true)
	n.mu.Lock()
	defer n.mu.Unlock()
	cur := n.claims[uid]
	if cur != nil && cur.h.Class == h.Class && cur.h.Namespace == h.Namespace &&
		slices.Equal(cur.h.Slices, h.Slices) && slices.Equal(cur.consumers, consumers) {
		return false
	}
	if cur != nil && cur.applied != nil {
		l.unapplyClaim(n, cur)
	}
	if n.claims == nil {
		n.claims = map[types.UID]*claimEntry{}
	}
	bound := h.clone()
	bound.Bound = true
	e := &claimEntry{uid: uid, h: bound, consumers: slices.Clone(consumers)}
	n.claims[uid] = e
	l.settleClaim(n, e)
	return true
}

// ReleaseClaim forgets a claim whose allocation was cleared or which was
// deleted. It reports whether that freed room on the node's cards (the
// entry was uncovered). It is idempotent.
func (l *Ledger) ReleaseClaim(uid types.UID) bool {
	l.mu.Lock()
	node, ok := l.claimNode[uid]
	delete(l.claimNode, uid)
	l.mu.Unlock()
	if !ok {
		return false
	}
	return l.dropClaim(uid, node)
}

// ClaimHolding returns a copy of what a claim's allocation holds and
// whether the claim counts it itself now (no consumer's holding covers it).
func (l *Ledger) ClaimHolding(uid types.UID) (h Holding, counted, ok bool) {
	l.mu.RLock()
	node, ok := l.claimNode[uid]
	l.mu.RUnlock()
	if !ok {
		return Holding{}, false, false
	}
	n := l.state(node, false)
	n.mu.RLock()
	defer n.mu.RUnlock()
	e := n.claims[uid]
	if e == nil {
		return Holding{}, false, false
	}
	return *e.h.clone(), e.applied != nil, true
}

func (l *Ledger) dropClaim(uid types.UID, node string) bool {
	n := l.state(node, false)
	if n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	e := n.claims[uid]
	if e == nil {
		return false
	}
	delete(n.claims, uid)
	if e.applied == nil {
		return false
	}
	l.unapplyClaim(n, e)
	return true
}

// claimsAfter settles the claims pod consumes on n after its holding there
// was recorded or dropped. The caller holds n.mu, not l.mu.
func (l *Ledger) claimsAfter(n *nodeState, pod types.UID) {
	for _, e := range n.claims {
		if slices.Contains(e.consumers, pod) {
			l.settleClaim(n, e)
		}
	}
}

// settleClaim applies the entry to the cards when no consumer's holding
// covers it, and takes it off when one does. The caller holds n.mu, not
// l.mu.
func (l *Ledger) settleClaim(n *nodeState, e *claimEntry) {
	covered := slices.ContainsFunc(e.consumers, func(u types.UID) bool { return n.pods[u] != nil })
	switch {
	case covered && e.applied != nil:
		l.unapplyClaim(n, e)
	case !covered && e.applied == nil:
		e.applied = e.onCards(n.node.Cards)
		e.applied.ApplyTo(n.node.Cards, 1)
		l.mu.Lock()
		l.held(e.uid, n, e.applied)
		l.mu.Unlock()
	}
}

func (l *Ledger) unapplyClaim(n *nodeState, e *claimEntry) {
	e.applied.ApplyTo(n.node.Cards, -1)
	e.applied = nil
	l.mu.Lock()
	if l.watcher != nil {
		l.watcher.Released(e.uid)
	}
	l.mu.Unlock()
}

// onCards is the entry's holding with each slice's UUID taken from the card
// at its index (a slice on an index the node lacks keeps its UUID and is
// skipped by ApplyTo).
func (e *claimEntry) onCards(cards []Card) *Holding {
	h := e.h.clone()
	for i, s := range h.Slices {
		if s.UUID != "" {
			continue
		}
		for _, c := range cards {
			if c.Index == s.Index {
				h.Slices[i].UUID = c.UUID
			}
		}
	}
	return h
}

// reapplyClaims puts the uncovered claims back on freshly rebuilt cards
// (recompute); the caller holds n.mu.
func (n *nodeState) reapplyClaims() {
	for _, e := range n.claims {
		if e.applied != nil {
			e.applied = e.onCards(n.node.Cards)
			e.applied.ApplyTo(n.node.Cards, 1)
		}
	}
}
