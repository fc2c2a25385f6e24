package ledger

import (
	"sync/atomic"

	"k8s.io/apimachinery/pkg/util/sets"
)

// eligibleSets are the names of the nodes labelled for qGPU pods, and of
// those the ones labelled mixed (online and offline pods). They are rebuilt
// lazily, after a node's labels change.
type eligibleSets struct {
	gen        uint64
	all, mixed sets.Set[string]
}

// eligibility tracks which nodes are eligible; SetNode and RemoveNode bump gen
// when a node's flags change, readers rebuild when their cached gen is stale.
type eligibility struct {
	gen    atomic.Uint64
	cached atomic.Pointer[eligibleSets]
}

// flagsChanged is called, with no lock held, after a node's labels changed.
func (e *eligibility) flagsChanged() { e.gen.Add(1) }

// Eligible returns the nodes labelled for qGPU pods (Invalid is not
// ReasonNotQGPUNode) and, when mixedOnly (online and offline pods), labelled
// mixed too. A labelled node with a broken inventory stays eligible, so that
// Filter names its fault. The set is shared: callers must not modify it. It
// is rebuilt (O(nodes), one node lock at a time) only after a node's labels
// changed or it was added or removed.
func (l *Ledger) Eligible(mixedOnly bool) sets.Set[string] {
	gen := l.eligible.gen.Load()
	c := l.eligible.cached.Load()
	if c == nil || c.gen != gen {
		c = l.buildEligible(gen)
		// A change during the build bumped gen past c.gen: the next call
		// rebuilds, so storing a stale set here is harmless.
		l.eligible.cached.Store(c)
	}
	if mixedOnly {
		return c.mixed
	}
	return c.all
}

func (l *Ledger) buildEligible(gen uint64) *eligibleSets {
	l.mu.RLock()
	states := make(map[string]*nodeState, len(l.nodes))
	for name, n := range l.nodes {
		states[name] = n
	}
	l.mu.RUnlock()
	c := &eligibleSets{gen: gen, all: sets.New[string](), mixed: sets.New[string]()}
	for name, n := range states {
		n.mu.RLock()
		qgpu, mixed := n.qgpu(), n.node.Mixed
		n.mu.RUnlock()
		if qgpu {
			c.all.Insert(name)
			if mixed {
				c.mixed.Insert(name)
			}
		}
	}
	return c
}
