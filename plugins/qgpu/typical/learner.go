// Package typical learns the workload's typical pod shapes online, from the
// general pods placed, for the fragmentation-aware policies: FGD measures
// fragmentation against the workload's typical pods. The scheduler plugin
// feeds its Learner in Reserve; the trace replay's online mode feeds one the
// same way, so both start cold and learn alike.
package typical

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"

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
	current atomic.Pointer[placement.Workload]
}

// NewLearner is a cold learner: Load is nil until the first Observe.
func NewLearner() *Learner {
	return &Learner{counts: map[shapeKey]float64{}}
}

// Load is the current workload, nil before any pod was observed.
func (l *Learner) Load() *placement.Workload { return l.current.Load() }

// Observe counts one placed general pod's containers; podCPU is its CPU
// request in milli-cores. Online and offline pods, and pods without qGPU
// containers, are no shape general pods leave room for.
func (l *Learner) Observe(req *request.Request, podCPU int64) {
	if req.SharesOneCard() || len(req.Containers) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range req.Containers {
		k := shapeKey{memoryGiB: c.PerCardMemoryGiB(), cores: c.PerCardCores(), cpu: podCPU, cards: c.Cards, whole: c.Whole,
			use: strings.Join(req.UseTypes, "|"), noUse: strings.Join(req.NoUseTypes, "|")}
		l.counts[k]++
		l.total++
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
