package placement

import (
	"math"
	"math/bits"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

// CardFree is a card's free share for general pods in milli-cards: the
// scarcer of memory and cores; 0 for a card general pods cannot use.
func CardFree(c *ledger.Card) int64 {
	if !c.Healthy || c.Online+c.Offline > 0 {
		return 0
	}
	mem := c.FreeMemoryGiB() * 1000 / max(c.MemoryGiB, 1)
	return min(mem, (protocol.CoresPerCard-c.UsedCores)*10)
}

// Frag is FGD's expected fragmentation of a node (FragAmountSumExceptQ3 of
// the paper's simulator), in milli-cards: for every typical pod, weighted by
// its share, the free card capacity it could not use here — all of it when
// the pod does not fit the node (too few cards or too little CPU), else the
// free capacity of the cards too small for it or of a model it does not
// accept. cpuLeft < 0 with cpuKnown false ignores CPU.
//
// Each card is read once: its room is checked once per card demand
// (Workload.room) and its model once per model (Workload.accepts, which
// remembers its answers), not once per shape.
func Frag(cards []ledger.Card, cpuLeft int64, cpuKnown bool, w *Workload) float64 {
	var total int64
	var fit [maxGPUShapes]int
	// usable is the free capacity of the cards a gpu shape can use.
	var usable [maxGPUShapes]int64
	var model string
	var accepted uint64
	for i := range cards {
		c := &cards[i]
		free := CardFree(c)
		total += free
		if i == 0 || c.Model != model {
			model, accepted = c.Model, w.accepts(c.Model)
		}
		for ok := accepted & w.room(c); ok != 0; ok &= ok - 1 {
			gi := bits.TrailingZeros64(ok)
			fit[gi]++
			usable[gi] += free
		}
	}
	var f float64
	for _, s := range w.shapes {
		frag := total
		if s.gpu >= 0 && (!cpuKnown || cpuLeft >= s.cpu) && fit[s.gpu] >= w.gpu[s.gpu].cards {
			frag = total - usable[s.gpu]
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

// strandBefore is the stranded capacity fragfit counts in a node's
// fragmentation before the pod. A node whose cards are all free is
// measured against its CPU capacity, not the CPU left: under churn a
// 96-core node of 8 cards held by one 8-card pod takes CPU-only pods
// (the node with the fewest free cards); when the 8-card pod leaves,
// every card is free but part of the CPU is held, so against the CPU
// left its free cards look stranded, and any pod bringing less CPU per
// card than the workload's average lowered that figure there: small pods
// were drawn to exactly the emptied big nodes multi-card pods need
// (issue 42). Measured against the capacity, the held CPU is charged to
// the pod that breaks into the node (the measure after the pod, strandAt,
// reads the CPU left as it is), and the node's own make-up (fewer cores
// per card than the workload brings) still counts before and after
// alike. Other nodes are measured against the CPU left: the general form
// (every node against its capacity's share for its free cards, when that
// is more) closed the churn loss as well but cost 0.10 of the paper-mode
// result on gpuspec10 (docs/performance.md#fragfit-under-churn-issue-42-2026-11-28).
// left measures every node against the CPU left, as fragfit did until
// issue 42 (FragFitOptions.StrandBeforeLeft).
func strandBefore(cards []ledger.Card, cpuLeft, cpuCap int64, perMilli float64, left bool) float64 {
	if perMilli == 0 {
		return 0
	}
	var free, capacity int64
	for i := range cards {
		free += CardFree(&cards[i])
		if cards[i].Healthy {
			capacity += 1000
		}
	}
	cpu := max(cpuLeft, 0)
	if !left && capacity > 0 && free == capacity {
		cpu = max(cpu, cpuCap)
	}
	return max(0, float64(free)-float64(cpu)/perMilli)
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
