package placement

import (
	"math/bits"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Shape is one typical pod of the target workload (FGD's "typical pods").
type Shape struct {
	// MemoryGiB and Cores are what the pod takes on each of its cards, in the
	// cards' units (the trace replay's paper mode counts GPU-milli as memory).
	MemoryGiB, Cores int64
	// Cards is 0 for a pod without qGPU requests (CPU only), else its cards;
	// Whole marks a pod that takes Cards empty cards.
	Cards int
	Whole bool
	// CPUMilli is the pod's CPU request.
	CPUMilli int64
	// Weight is the shape's share of the workload's pods; NewWorkload
	// renormalises the weights it keeps to sum to 1.
	Weight float64
	// UseTypes and NoUseTypes are the shape's card model filters, as a
	// request's (lower-case substrings; none: any model).
	UseTypes, NoUseTypes []string
}

// The caps on a workload, so that Frag's cost per node is bounded whatever
// the cluster runs (docs/performance.md#cost-of-filter-and-score). Shapes
// are taken heaviest first; one past a cap is left out, and the weights of
// those kept are renormalised, as FGD's popularity threshold leaves out the
// rarest shapes.
const (
	// maxGPUShapes bounds the distinct card demands (with their model
	// filters): Frag keeps its per-demand counts on the stack, and which
	// demands a card model accepts in one word (Workload.accepts).
	maxGPUShapes = 64
	// MaxShapes bounds the shapes: Frag passes over them once per node.
	MaxShapes = 128
	// maxModels bounds the card models (and card memories) a workload
	// remembers answers for; clusters have a handful. Past it, the answer
	// is worked out on every call.
	maxModels = 64
)

type gpuShape struct {
	memoryGiB, cores int64
	cards            int
	whole            bool
	// models is the shape's filter, "" for any model.
	models string
	filter request.Request
}

type cpuShape struct {
	gpu    int // index into gpu, -1 for CPU-only pods
	cpu    int64
	weight float64
}

// gpuKey tells card demands apart: a gpuShape without its parsed filter.
type gpuKey struct {
	memoryGiB, cores int64
	cards            int
	whole            bool
	models           string
}

// demand is a card demand as one card sees it (without the card count and
// the model filter), and the gpu shapes that make it, so that Frag checks
// each card's room once per demand.
type demand struct {
	memoryGiB, cores int64
	whole            bool
	shapes           uint64
}

// Workload is a target workload prepared for Frag: shapes grouped by their
// card demand, so each demand is checked once per card. It is never
// changed once built (the learner publishes a new one), except for the
// answers it remembers, which depend on its shapes only.
type Workload struct {
	gpu     []gpuShape
	shapes  []cpuShape
	demands []demand
	// filtered has the bits of the gpu shapes with a model filter; the
	// others accept every model.
	filtered uint64
	// accepted remembers, per card model, the gpu shapes that accept it
	// (a bit per shape); perMilli, per card memory, cpuPerMilli.
	accepted atomic.Pointer[[]modelAnswer]
	perMilli atomic.Pointer[[]memoryAnswer]
}

type modelAnswer struct {
	model    string
	accepted uint64
}

type memoryAnswer struct {
	memoryGiB int64
	perMilli  float64
}

// NewWorkload prepares shapes; shapes without weight are dropped, and the
// weights of those kept are renormalised to sum to 1 (the paper's typical
// pods: the fragmentation a node shows to "the next pod", whose shape is
// drawn from the workload). At most MaxShapes shapes of maxGPUShapes card
// demands are kept, the heaviest.
func NewWorkload(shapes []Shape) *Workload {
	sorted := append([]Shape(nil), shapes...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Weight > sorted[j].Weight })
	w := &Workload{}
	index := map[gpuKey]int{}
	for _, s := range sorted {
		if s.Weight <= 0 || len(w.shapes) == MaxShapes {
			continue
		}
		cs := cpuShape{gpu: -1, cpu: s.CPUMilli, weight: s.Weight}
		if s.Cards > 0 {
			i, ok := w.gpuIndex(index, &s)
			if !ok {
				continue
			}
			cs.gpu = i
		}
		w.shapes = append(w.shapes, cs)
	}
	var sum float64
	for _, cs := range w.shapes {
		sum += cs.weight
	}
	for i := range w.shapes {
		w.shapes[i].weight /= sum
	}
	w.groupDemands()
	return w
}

// gpuIndex is the index of s's card demand, added when new; false when it
// is new and maxGPUShapes are taken.
func (w *Workload) gpuIndex(index map[gpuKey]int, s *Shape) (int, bool) {
	g := gpuShape{memoryGiB: s.MemoryGiB, cores: s.Cores, cards: s.Cards, whole: s.Whole,
		models: strings.Join(s.UseTypes, "|") + "!" + strings.Join(s.NoUseTypes, "|")}
	key := gpuKey{g.memoryGiB, g.cores, g.cards, g.whole, g.models}
	if i, ok := index[key]; ok {
		return i, true
	}
	if len(w.gpu) == maxGPUShapes {
		return 0, false
	}
	index[key] = len(w.gpu)
	g.filter = request.Request{UseTypes: s.UseTypes, NoUseTypes: s.NoUseTypes}
	if len(s.UseTypes)+len(s.NoUseTypes) > 0 {
		w.filtered |= 1 << len(w.gpu)
	}
	w.gpu = append(w.gpu, g)
	return len(w.gpu) - 1, true
}

// groupDemands fills w.demands from w.gpu.
func (w *Workload) groupDemands() {
	for gi := range w.gpu {
		g := &w.gpu[gi]
		d := demand{memoryGiB: g.memoryGiB, cores: g.cores, whole: g.whole}
		if g.whole {
			d.cores = protocol.CoresPerCard
		}
		found := false
		for k := range w.demands {
			if o := &w.demands[k]; o.memoryGiB == d.memoryGiB && o.cores == d.cores && o.whole == d.whole {
				o.shapes |= 1 << gi
				found = true
				break
			}
		}
		if !found {
			d.shapes = 1 << gi
			w.demands = append(w.demands, d)
		}
	}
}

// Len is the number of shapes kept.
func (w *Workload) Len() int { return len(w.shapes) }

// room has the bits of the gpu shapes whose card demand c has room for, its
// model aside.
func (w *Workload) room(c *ledger.Card) uint64 {
	var fit uint64
	for k := range w.demands {
		d := &w.demands[k]
		if d.whole && !c.Empty() {
			continue
		}
		if c.Fits(protocol.ClassGeneral, d.memoryGiB, d.cores, true) {
			fit |= d.shapes
		}
	}
	return fit
}

// accepts has the bits of the gpu shapes that accept cards of model: a
// card of a model a shape does not accept is fragment for it, whatever its
// room. The answer is worked out once per model (request.MatchesModel for
// every filtered shape) and remembered.
func (w *Workload) accepts(model string) uint64 {
	all := uint64(1)<<len(w.gpu) - 1
	if w.filtered == 0 {
		return all
	}
	answers := w.accepted.Load()
	if answers != nil {
		for _, a := range *answers {
			if a.model == model {
				return a.accepted
			}
		}
	}
	accepted := all &^ w.filtered
	for f := w.filtered; f != 0; f &= f - 1 {
		gi := bits.TrailingZeros64(f)
		if w.gpu[gi].filter.MatchesModel(model) {
			accepted |= 1 << gi
		}
	}
	remember(&w.accepted, answers, modelAnswer{model, accepted})
	return accepted
}

// cpuPerMilli is the CPU the workload's pods with cards bring per
// milli-card they take on cards of memoryGiB, weighted by their shares: a
// pod's take of a card is the larger of its memory and cores shares (all
// of it for whole cards), as CardFree's room is the smaller. It depends on
// the workload and the memory only, so it is worked out once per card
// memory and remembered.
func (w *Workload) cpuPerMilli(memoryGiB int64) float64 {
	answers := w.perMilli.Load()
	if answers != nil {
		for _, a := range *answers {
			if a.memoryGiB == memoryGiB {
				return a.perMilli
			}
		}
	}
	v := w.cpuPerMilliOf(memoryGiB)
	remember(&w.perMilli, answers, memoryAnswer{memoryGiB, v})
	return v
}

// cpuPerMilliOf works cpuPerMilli out.
func (w *Workload) cpuPerMilliOf(memoryGiB int64) float64 {
	var cpu, milli float64
	for _, cs := range w.shapes {
		if cs.gpu < 0 {
			continue
		}
		g := &w.gpu[cs.gpu]
		take := int64(1000)
		if !g.whole {
			take = min(1000, max(g.memoryGiB*1000/max(memoryGiB, 1), g.cores*10))
		}
		cpu += cs.weight * float64(cs.cpu)
		milli += cs.weight * float64(take*int64(g.cards))
	}
	if milli == 0 {
		return 0
	}
	return cpu / milli
}

// remember adds answer to the list at p, which held old when the caller
// read it, unless maxModels are held: a copy with it appended replaces the
// list. Filter calls run concurrently: one that loses the swap retries on
// the newer list (which may hold its answer already: a duplicate is
// harmless, the first one is read).
func remember[T any](p *atomic.Pointer[[]T], old *[]T, answer T) {
	for {
		var next []T
		if old != nil {
			if len(*old) >= maxModels {
				return
			}
			next = append(make([]T, 0, len(*old)+1), *old...)
		}
		next = append(next, answer)
		if p.CompareAndSwap(old, &next) {
			return
		}
		old = p.Load()
	}
}
