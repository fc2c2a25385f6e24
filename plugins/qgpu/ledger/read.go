package ledger

// The ledger's readers: the scheduler's Filter and Score (CopyNode, Ref),
// and readers off the scheduling path (Range).

// CopyNode copies a node's state into buf (reused when large enough, so the
// scheduler's hot path allocates nothing) and reports whether it is known.
func (l *Ledger) CopyNode(name string, buf []Card) (Node, bool) {
	n := l.state(name, false)
	if n == nil {
		return Node{Cards: buf[:0]}, false
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := n.node
	out.Cards = append(buf[:0], n.node.Cards...)
	return out, n.known
}

// HasCards reports whether the node has qGPU cards (healthy or not).
func (l *Ledger) HasCards(name string) bool {
	n := l.state(name, false)
	if n == nil {
		return false
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	return len(n.node.Cards) > 0
}

// Range calls f with every known node's state, one node at a time under
// that node's read lock, without a copy: f must not change or keep the
// cards. It is for readers off the scheduling path (the metrics collector
// at scrape time); the order of nodes is unspecified.
func (l *Ledger) Range(f func(name string, n Node)) {
	l.mu.RLock()
	names := make([]string, 0, len(l.nodes))
	states := make([]*nodeState, 0, len(l.nodes))
	for name, n := range l.nodes {
		names, states = append(names, name), append(states, n)
	}
	l.mu.RUnlock()
	for i, n := range states {
		n.mu.RLock()
		if n.known {
			f(names[i], n.node)
		}
		n.mu.RUnlock()
	}
}

// Ref is a node's entry in the ledger, for a caller that finds a node once
// and reads it often (the scheduler plugin keeps one per NodeInfo): an entry
// stays its node's for the ledger's life, as RemoveNode empties it and
// nothing drops it. The zero Ref is a node never seen.
type Ref struct{ n *nodeState }

// Ref finds a node's entry.
func (l *Ledger) Ref(name string) Ref { return Ref{l.state(name, false)} }

// Known reports whether the ledger had an entry for the node.
func (r Ref) Known() bool { return r.n != nil }

// Read calls read with the node's state under its read lock, without a
// copy: read must not change or keep the cards. A node never seen reads as a
// node without cards.
func (r Ref) Read(read func(Node) string) string {
	if r.n == nil {
		return read(Node{})
	}
	r.n.mu.RLock()
	defer r.n.mu.RUnlock()
	return read(r.n.node)
}
