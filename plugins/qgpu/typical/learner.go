// Package typical learns the workload's typical pod shapes online, from the
// general pods placed, CPU-only pods included, for the fragmentation-aware
// policies: FGD measures fragmentation against the workload's typical pods.
// The scheduler plugin feeds its Learner in Reserve, and from its pod
// informer with every pod bound to a qGPU node: those bound before it
// started (counted once the informers have synced, so a restarted or
// newly elected scheduler starts from the cluster's shapes) and those
// other schedulers, or the leader seen from a standby, bind since. The
// trace replay's online mode feeds one as Reserve does, and its
// --failover-at rebuilds one from the bound pods as the plugin does.
package typical

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// The learner keeps what the paper derives from the trace: the most frequent
// shapes (card demand, CPU and the pod's model filters) that make up 95% of
// the pods, their weights renormalised to 1 (placement.NewWorkload).
const (
	// share is the paper's popularity threshold.
	share = 0.95
	// RelearnEvery rebuilds the snapshot after this many placements (and at
	// each of the first ones), so the hot path only loads a pointer.
	RelearnEvery = 64
	// forgetAt halves all counts when they sum past it, so the workload
	// follows change.
	forgetAt = 1 << 16
	// maxCounted bounds the distinct shapes counted. A new shape past it
	// halves the counts, as forgetAt does, until some are dropped: the
	// rarest, counted once since the last halving, go first. The workload
	// built from the counts has caps of its own (placement.MaxShapes).
	maxCounted = 1024
)

type shapeKey struct {
	memoryGiB, cores, cpu int64
	cards                 int
	whole                 bool
	// use and noUse are the pod's model filters joined by "|".
	use, noUse string
}

// Learner counts shapes under a lock (once per pod placed) and publishes an
// immutable placement.Workload that the hot path reads without one.
type Learner struct {
	mu      sync.Mutex
	counts  map[shapeKey]float64
	total   float64
	pending int
	// counted holds the pods ObservePod counted and Forget has not dropped,
	// so that a pod that two sources report is counted once.
	counted map[types.UID]struct{}
	current atomic.Pointer[placement.Workload]
}

// NewLearner is a cold learner: Load is nil until the first Observe.
func NewLearner() *Learner {
	return &Learner{counts: map[shapeKey]float64{}, counted: map[types.UID]struct{}{}}
}

// Load is the current workload, nil before any pod was observed.
func (l *Learner) Load() *placement.Workload { return l.current.Load() }

// Observe counts one placed general pod; podCPU is its CPU request in
// milli-cores. A pod without qGPU containers (req nil, or CPU only) is a
// shape of its own, with no cards: FGD measures what a node strands for
// such pods too, and their share sets the weight of the others. Online and
// offline pods are no shape general pods leave room for, nor is a pod that
// takes a whole node.
func (l *Learner) Observe(req *request.Request, podCPU int64) {
	if !isShape(req) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count(req, podCPU)
}

// ObservePod is Observe for a pod that may be reported more than once (by
// the scheduler's Reserve, and by the pod informer once it is bound): it
// counts the pod only the first time, and reports whether it did.
func (l *Learner) ObservePod(uid types.UID, req *request.Request, podCPU int64) bool {
	if !isShape(req) {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.counted[uid]; ok {
		return false
	}
	l.counted[uid] = struct{}{}
	l.count(req, podCPU)
	return true
}

// Counted reports whether ObservePod has counted the pod: a caller that
// must parse the pod's request first can skip it (the informer, for the
// pods this scheduler's Reserve counted already).
func (l *Learner) Counted(uid types.UID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.counted[uid]
	return ok
}

// Publish rebuilds the snapshot from the counts now, however few pods
// were counted since the last one: after a batch (the cluster's bound pods
// counted at start), the workload is all of it at once, not up to
// RelearnEvery-1 pods behind. A learner that counted nothing stays cold.
func (l *Learner) Publish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total == 0 {
		return
	}
	l.pending = 0
	l.current.Store(l.snapshot())
}

// isShape reports whether a pod of req (nil: no qGPU request) is a shape
// general pods leave room for.
func isShape(req *request.Request) bool {
	return req == nil || !(req.SharesOneCard() || req.NodeExclusive)
}

// Forget drops a pod that is gone from the pods ObservePod counted; its
// shape stays in the counts.
func (l *Learner) Forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.counted, uid)
}

// count adds the pod's containers (one CPU-only shape for a pod without
// any) and republishes the workload when due; the caller holds l.mu.
func (l *Learner) count(req *request.Request, podCPU int64) {
	if req == nil || len(req.Containers) == 0 {
		l.add(shapeKey{cpu: podCPU})
	} else {
		for _, c := range req.Containers {
			l.add(shapeKey{memoryGiB: c.PerCardMemoryGiB(), cores: c.PerCardCores(), cpu: podCPU, cards: c.Cards, whole: c.Whole,
				use: strings.Join(req.UseTypes, "|"), noUse: strings.Join(req.NoUseTypes, "|")})
		}
	}
	if l.total > forgetAt {
		l.halve()
	}
	l.pending++
	if l.pending >= RelearnEvery || l.total < RelearnEvery {
		l.pending = 0
		l.current.Store(l.snapshot())
	}
}

// add counts one pod of shape k, making room under maxCounted first; the
// caller holds l.mu.
func (l *Learner) add(k shapeKey) {
	if _, ok := l.counts[k]; !ok {
		for len(l.counts) >= maxCounted {
			l.halve()
		}
	}
	l.counts[k]++
	l.total++
}

// halve halves every count, dropping those below one; the caller holds l.mu.
func (l *Learner) halve() {
	for k, v := range l.counts {
		if v /= 2; v < 1 {
			delete(l.counts, k)
			continue
		}
		l.counts[k] = v
	}
	l.total /= 2
}

// snapshot builds the workload from the counts; the caller holds l.mu.
func (l *Learner) snapshot() *placement.Workload {
	keys := make([]shapeKey, 0, len(l.counts))
	for k := range l.counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if a, b := l.counts[keys[i]], l.counts[keys[j]]; a != b {
			return a > b
		}
		return less(keys[i], keys[j])
	})
	var shapes []placement.Shape
	var covered float64
	for _, k := range keys {
		if covered >= share {
			break
		}
		w := l.counts[k] / l.total
		covered += w
		shapes = append(shapes, placement.Shape{MemoryGiB: k.memoryGiB, Cores: k.cores, Cards: k.cards,
			Whole: k.whole, CPUMilli: k.cpu, Weight: w, UseTypes: split(k.use), NoUseTypes: split(k.noUse)})
	}
	return placement.NewWorkload(shapes)
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "|")
}

func less(a, b shapeKey) bool {
	if a.memoryGiB != b.memoryGiB {
		return a.memoryGiB < b.memoryGiB
	}
	if a.cores != b.cores {
		return a.cores < b.cores
	}
	if a.cpu != b.cpu {
		return a.cpu < b.cpu
	}
	if a.cards != b.cards {
		return a.cards < b.cards
	}
	if a.use != b.use {
		return a.use < b.use
	}
	return a.noUse < b.noUse
}
