package qgpu

import (
	"sync"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// scoreStash carries the score Filter computes for a node, while it holds
// the node's cards under the ledger's read lock, to Score in the same
// scheduling cycle: Score then neither looks the node up in the ledger again
// nor copies its cards (on 5000 nodes that lookup and copy were most of
// Score's time, make bench-throughput SIZE=large). Keys are the NodeInfos of
// the cycle's snapshot, which live at least as long as the cycle. PreFilter
// resets the stash: kube-scheduler runs one scheduling cycle at a time, and
// each profile has its own plugin. Filter runs on many goroutines, so the
// stash is sharded by the NodeInfo's address.
type scoreStash struct {
	shards [stashShards]stashShard
}

const stashShards = 16

type stashShard struct {
	mu     sync.Mutex
	scores map[*framework.NodeInfo]int64
	// pad fills the shard's 64-byte cache line, so that two shards never share one.
	_ [48]byte
}

// reset forgets the last cycle's scores, keeping the maps' room.
func (st *scoreStash) reset() {
	for i := range st.shards {
		sh := &st.shards[i]
		sh.mu.Lock()
		clear(sh.scores)
		sh.mu.Unlock()
	}
}

// put records the node's score for this cycle. NodeInfos of another type
// (none in kube-scheduler) are not recorded; Score computes theirs.
func (st *scoreStash) put(ni fwk.NodeInfo, score int64) {
	key, ok := ni.(*framework.NodeInfo)
	if !ok {
		return
	}
	sh := st.shard(key)
	sh.mu.Lock()
	if sh.scores == nil {
		sh.scores = map[*framework.NodeInfo]int64{}
	}
	sh.scores[key] = score
	sh.mu.Unlock()
}

// get is the score Filter recorded for the node in this cycle.
func (st *scoreStash) get(ni fwk.NodeInfo) (int64, bool) {
	key, ok := ni.(*framework.NodeInfo)
	if !ok {
		return 0, false
	}
	sh := st.shard(key)
	sh.mu.Lock()
	score, ok := sh.scores[key]
	sh.mu.Unlock()
	return score, ok
}

// shard picks a shard from the NodeInfo's address.
func (st *scoreStash) shard(key *framework.NodeInfo) *stashShard {
	return &st.shards[slotOf(key)%stashShards]
}
