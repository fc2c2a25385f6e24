// Package ledger is the scheduler's per-card bookkeeping: for every card of
// every node, which pods hold how much memory and how many cores, and of
// which class (docs/ledger.md). It imports no scheduler framework code, so
// the trace replay and the invariant checker run the very same accounting.
//
// # A holding's life
//
// A pod's holding is assumed or bound, as a pod is in kube-scheduler's own
// cache:
//
//	(none) --Reserve--> assumed --Observe, same node--> bound
//	                    assumed --Observe, other node--> bound there (the API wins)
//	(none) --Observe--> bound   (rebuild after a restart; a bind the scheduler took for failed)
//	assumed --Unreserve--> (none)
//	assumed --MarkUncertain--> uncertain   (the binding call's outcome is unknown)
//	uncertain --Observe--> bound
//	uncertain --Unbound, newer version--> (none)
//	any --Release--> (none)   (the pod was deleted or terminated)
//
// Unreserve never frees a bound holding: once the informer has seen the pod
// bound with its assignment, the pod holds the slices whatever the
// scheduler's bind call returned (a bind can fail after the apiserver wrote
// it). Nor does it free an uncertain one, whose binding may have been
// written and not yet seen (uncertain.go states when it is freed). Observe
// never replaces a bound holding: the first assignment seen bound wins, and
// it reports one that overbooks a card (ObserveChecked). Release is for a
// pod that is gone, and frees any state.
package ledger
