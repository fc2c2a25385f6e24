package ledger

import "k8s.io/apimachinery/pkg/types"

// # Bind-uncertain holdings
//
// A binding call can fail without saying whether the apiserver wrote the
// binding (a timeout, a connection reset, a 5xx). Freeing the slices then,
// as Unreserve frees an assumed holding, would let the next pod be placed on
// memory the pod may hold, and the informer would later show the pod bound
// on top of it. So the scheduler marks such a holding Uncertain instead.
//
// Invariant: a holding is assumed (neither Bound nor Uncertain), uncertain
// (Uncertain) or bound (Bound), never Bound and Uncertain together, and a
// pod has at most one holding. An uncertain holding keeps its slices
// accounted until one of these, and nothing else, happens:
//
//   - Observe: the informer shows the pod bound with its assignment; the
//     holding becomes bound (on the node the API says).
//   - Unbound: the informer shows the pod unbound at a version newer than
//     Since. The binding was conditioned on version Since (the apiserver's
//     resourceVersion precondition of pods/binding), so once the pod has
//     been written at a newer version without it, it can never be written.
//   - Release: the pod is deleted or has terminated.
//
// Unreserve keeps an uncertain holding, and Reserve refuses a pod that holds
// one, as it refuses any pod that holds slices.

// MarkUncertain turns the pod's assumed holding on node into an uncertain
// one whose binding was conditioned on version since. It reports whether it
// did: a holding the informer already showed bound stays bound, and one on
// another node is not the binding's.
func (l *Ledger) MarkUncertain(uid types.UID, node string, since uint64) bool {
	n := l.state(node, false)
	if n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	cur := l.holding(uid)
	if cur == nil || cur.Bound || cur.Node != node {
		return false
	}
	next := cur.clone()
	next.Uncertain, next.Since = true, since
	return l.swap(uid, n, cur, next)
}

// Unbound frees the pod's uncertain holding when the API showed the pod
// unbound at version: a version newer than the holding's Since proves the
// binding was not written and never will be. Assumed and bound holdings are
// left alone (an assumed pod is unbound until its binding). It reports
// whether it freed the holding.
func (l *Ledger) Unbound(uid types.UID, version uint64) bool {
	return l.drop(uid, func(h *Holding) bool { return h.Uncertain && version > h.Since })
}
