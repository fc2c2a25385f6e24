package qgpu

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Learning the target workload for the fragmentation-aware policies: FGD
// measures fragmentation against the workload's typical pods. The scheduler
// learns them from the general pods it places, as the paper derives them from
// the trace: the most frequent shapes (card demand, CPU and the pod's model
// filters) that make up 95% of the pods, their weights renormalised to 1
// (placement.NewWorkload).
const (
	// typicalShare is the paper's popularity threshold.
	typicalShare = 0.95
	// relearnEvery rebuilds the snapshot after this many placements (and at
	// the first ones), so the hot path only loads a pointer.
	relearnEvery = 64
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

// workloadLearner counts shapes under a lock (in Reserve, once per pod) and
// publishes an immutable placement.Workload that Filter, Score and Reserve read.
type workloadLearner struct {
	mu      sync.Mutex
	counts  map[shapeKey]float64
	total   float64
	pending int
	current atomic.Pointer[placement.Workload]
}

func newWorkloadLearner() *workloadLearner {
	return &workloadLearner{counts: map[shapeKey]float64{}}
}

// Load is the current workload, nil before any pod was seen.
func (l *workloadLearner) Load() *placement.Workload { return l.current.Load() }

// observe counts one general pod's containers.
func (l *workloadLearner) observe(req *request.Request, podCPU int64) {
	if req.SharesOneCard() {
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
		for k, v := range l.counts {
			if v /= 2; v < 1 {
				delete(l.counts, k)
				continue
			}
			l.counts[k] = v
		}
		l.total /= 2
	}
	l.pending++
	if l.pending >= relearnEvery || l.total < relearnEvery {
		l.pending = 0
		l.current.Store(l.snapshot())
	}
}

// snapshot builds the workload from the counts; the caller holds l.mu.
func (l *workloadLearner) snapshot() *placement.Workload {
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
		if covered >= typicalShare {
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

// podCPU is the pod's CPU request in milli-cores, as the scheduler counts it.
func podCPU(pod *v1.Pod) int64 {
	var cpu int64
	for i := range pod.Spec.Containers {
		cpu += pod.Spec.Containers[i].Resources.Requests.Cpu().MilliValue()
	}
	return cpu
}

// env is what the policies see of a node besides its cards; nothing for
// binpack and spread, which do not look (reading the NodeInfo costs cache
// misses on every node scored).
func (p *QGPU) env(s *cycleState, ni fwk.NodeInfo) placement.Env {
	if !p.nodePolicy.UsesEnv() && !p.cardPolicy.UsesEnv() {
		return placement.Env{}
	}
	e := placement.Env{Workload: p.workload.Load(), PodCPU: s.podCPU}
	if ni != nil && ni.Node() != nil {
		e.CPUCap = ni.GetAllocatable().GetMilliCPU()
		e.CPULeft = e.CPUCap - ni.GetRequested().GetMilliCPU()
		e.Rank = placement.NodeRank(ni.Node().Name)
	}
	return e
}
