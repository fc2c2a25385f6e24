package qgpu

import (
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// Filter scores a node while it holds a copy of the node's cards anyway, and
// stashes the score in the node's nodeRefs entry for Score in the same
// scheduling cycle: Score then neither looks the node up in the ledger again
// nor copies its cards (on 5000 nodes that lookup and copy were most of
// Score's time, make bench-throughput SIZE=large).
// PreFilter numbers the cycles (cycleState.cycle), and a score counts only
// in the cycle it was stashed in: kube-scheduler runs one scheduling cycle
// at a time, and each profile has its own plugin.

// stash records Filter's score of the entry's node for the pod of cycle.
func (e *nodeRef) stash(cycle uint64, score int64) {
	e.score.Store(score)
	e.scoredIn.Store(cycle)
}

// stashed is the score Filter stashed for the node of ni in cycle.
func (c *nodeRefs) stashed(ni fwk.NodeInfo, cycle uint64) (int64, bool) {
	key, ok := ni.(*framework.NodeInfo)
	if !ok {
		return 0, false
	}
	e := c.lookup(key)
	if e == nil || e.scoredIn.Load() != cycle {
		return 0, false
	}
	score := e.score.Load()
	// Rejects a score of another cycle written meanwhile (none in
	// kube-scheduler: Score runs after the cycle's Filter calls).
	return score, e.scoredIn.Load() == cycle
}
