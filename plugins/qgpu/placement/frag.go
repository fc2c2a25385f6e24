package placement

import (
	"math"
	"sort"
	"strings"

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

// maxGPUShapes bounds the distinct card demands a workload keeps, so that
// Frag works on the stack: the heaviest are kept.
const maxGPUShapes = 64

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

// Workload is a target workload prepared for Frag: shapes grouped by their
// card demand, so each demand is checked once per card.
type Workload struct {
	gpu    []gpuShape
	shapes []cpuShape
}

// NewWorkload prepares shapes; shapes without weight are dropped, and the
// weights of those kept are renormalised to sum to 1 (the paper's typical
// pods: the fragmentation a node shows to "the next pod", whose shape is
// drawn from the workload).
func NewWorkload(shapes []Shape) *Workload {
	sorted := append([]Shape(nil), shapes...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Weight > sorted[j].Weight })
	w := &Workload{}
	index := map[gpuKey]int{}
	for _, s := range sorted {
		if s.Weight <= 0 {
			continue
		}
		cs := cpuShape{gpu: -1, cpu: s.CPUMilli, weight: s.Weight}
		if s.Cards > 0 {
			g := gpuShape{memoryGiB: s.MemoryGiB, cores: s.Cores, cards: s.Cards, whole: s.Whole,
				models: strings.Join(s.UseTypes, "|") + "!" + strings.Join(s.NoUseTypes, "|")}
			key := gpuKey{g.memoryGiB, g.cores, g.cards, g.whole, g.models}
			i, ok := index[key]
			if !ok {
				if len(w.gpu) == maxGPUShapes {
					continue
				}
				i = len(w.gpu)
				index[key] = i
				g.filter = request.Request{UseTypes: s.UseTypes, NoUseTypes: s.NoUseTypes}
				w.gpu = append(w.gpu, g)
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
	return w
}

// Len is the number of shapes kept.
func (w *Workload) Len() int { return len(w.shapes) }

// CardFree is a card's free share for general pods in milli-cards: the
// scarcer of memory and cores; 0 for a card general pods cannot use.
func CardFree(c *ledger.Card) int64 {
	if !c.Healthy || c.Online+c.Offline > 0 {
		return 0
	}
	mem := c.FreeMemoryGiB() * 1000 / max(c.MemoryGiB, 1)
	return min(mem, (protocol.CoresPerCard-c.UsedCores)*10)
}

// fits reports whether a pod of the shape could take the card: a card of a
// model the shape does not accept is fragment for it, whatever its room.
func (g *gpuShape) fits(c *ledger.Card) bool {
	if !g.filter.MatchesModel(c.Model) {
		return false
	}
	if g.whole {
		return c.Empty() && c.Fits(protocol.ClassGeneral, g.memoryGiB, protocol.CoresPerCard, true)
	}
	return c.Fits(protocol.ClassGeneral, g.memoryGiB, g.cores, true)
}

// Frag is FGD's expected fragmentation of a node (FragAmountSumExceptQ3 of
// the paper's simulator), in milli-cards: for every typical pod, weighted by
// its share, the free card capacity it could not use here — all of it when
// the pod does not fit the node (too few cards or too little CPU), else the
// free capacity of the cards too small for it or of a model it does not
// accept. cpuLeft < 0 with cpuKnown
// false ignores CPU.
func Frag(cards []ledger.Card, cpuLeft int64, cpuKnown bool, w *Workload) float64 {
	var total int64
	for i := range cards {
		total += CardFree(&cards[i])
	}
	var fit [maxGPUShapes]int
	var stranded [maxGPUShapes]int64
	for gi := range w.gpu {
		g := &w.gpu[gi]
		for i := range cards {
			if g.fits(&cards[i]) {
				fit[gi]++
			} else {
				stranded[gi] += CardFree(&cards[i])
			}
		}
	}
	var f float64
	for _, s := range w.shapes {
		frag := total
		if s.gpu >= 0 && (!cpuKnown || cpuLeft >= s.cpu) && fit[s.gpu] >= w.gpu[s.gpu].cards {
			frag = stranded[s.gpu]
		}
		f += s.weight * float64(frag)
	}
	return f
}

// Strand is the free card capacity of a node, in milli-cards, that the
// node's free CPU cannot carry: the pods with cards the workload brings
// take cpuPerMilli of CPU with every milli-card (Workload.cpuPerMilli, on
// cards of the node's memory), so cpuLeft carries cpuLeft/cpuPerMilli of
// the free capacity and the rest will stand idle once the CPU is gone.
// FGD's Frag sees CPU only when the next pod no longer fits; Strand is the
// same waste seen over the node's remaining life. 0 without a workload
// with cards. A node's cards are of one model: the first one's memory
// stands for all.
func Strand(cards []ledger.Card, cpuLeft int64, w *Workload) float64 {
	if len(cards) == 0 || w == nil {
		return 0
	}
	return strandAt(cards, cpuLeft, w.cpuPerMilli(cards[0].MemoryGiB))
}

// strandAt is Strand with the workload's CPU per milli-card already
// worked out (0: nothing strands), so that Evaluate passes over the
// shapes once for the node before and after the pod.
func strandAt(cards []ledger.Card, cpuLeft int64, perMilli float64) float64 {
	if perMilli == 0 {
		return 0
	}
	var free int64
	for i := range cards {
		free += CardFree(&cards[i])
	}
	return max(0, float64(free)-float64(max(cpuLeft, 0))/perMilli)
}

// cpuPerMilli is the CPU the workload's pods with cards bring per
// milli-card they take on cards of memoryGiB, weighted by their shares: a
// pod's take of a card is the larger of its memory and cores shares (all
// of it for whole cards), as CardFree's room is the smaller.
func (w *Workload) cpuPerMilli(memoryGiB int64) float64 {
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

// fgdScore is the simulator's score: sigmoid of the fragmentation decrease
// in cards, scaled to MaxScore and truncated to an integer as it was.
func fgdScore(before, after float64) int64 {
	return int64(sigmoid((before-after)/1000) * MaxScore)
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// envFrag is Frag with the CPU the env knows.
func envFrag(cards []ledger.Card, env *Env, cpuLeft int64) float64 {
	return Frag(cards, cpuLeft, env.CPUCap > 0, env.Workload)
}

// cpuPerMilli is the env workload's CPU per milli-card on the node's
// cards, for strandAt: 0 when the env does not know the node's CPU.
func (e *Env) cpuPerMilli(cards []ledger.Card) float64 {
	if e.CPUCap <= 0 || e.Workload == nil || len(cards) == 0 {
		return 0
	}
	return e.Workload.cpuPerMilli(cards[0].MemoryGiB)
}

// fragBefore is envFrag of the node before the pod: env.Before when the
// caller measured it.
func fragBefore(cards []ledger.Card, env *Env) float64 {
	if env.BeforeKnown {
		return env.Before
	}
	return envFrag(cards, env, env.CPULeft)
}
