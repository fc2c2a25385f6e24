package placement

import (
	"math"
	"slices"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// MaxScore matches the scheduler framework's MaxNodeScore.
const MaxScore = 100

// NodeScore scores a node from its cards after the pod was placed (Place has
// already added the pod to cards): binpack prefers the fullest node, spread the
// emptiest. Online pods prefer nodes where their card has no offline pods, and
// offline pods nodes where their card has no online pods (Tencent qGPU's
// co-location scheduler), so the
// class preference holds across nodes, not only across the cards of one.
func NodeScore(cards []ledger.Card, req *request.Request, policy Policy, choices []Choice) int64 {
	used, total := fill(cards)
	if total == 0 {
		return 0
	}
	fill := used * MaxScore / total
	switch req.Class {
	case protocol.ClassOnline:
		// Spread, and a bonus when the chosen card has no offline pod.
		s := (MaxScore - fill) / 2
		if len(choices) > 0 && cards[choices[0].Card].Offline == 0 {
			s += MaxScore / 2
		}
		return s
	case protocol.ClassOffline:
		s := fill / 2
		if len(choices) > 0 && cards[choices[0].Card].Online == 0 {
			s += MaxScore / 2
		}
		return s
	}
	if policy == Spread {
		return MaxScore - fill
	}
	return fill
}

// fill sums the node's used and total capacity, memory and cores alike.
func fill(cards []ledger.Card) (used, total int64) {
	for i := range cards {
		c := &cards[i]
		if !c.Healthy {
			continue
		}
		total += c.MemoryGiB*protocol.CoresPerCard + c.MemoryGiB*protocol.CoresPerCard
		used += c.UsedMemoryGiB*protocol.CoresPerCard + c.MemoryGiB*max(c.UsedCores, c.UsedGreedy)
	}
	return used, total
}

// Evaluate places req on cards (a scratch copy the caller owns: Place adds
// the pod to it) and scores the node by nodePolicy. The scheduler's Score and
// the trace replay both call it; scores then go through Normalize. It returns
// the choices appended to out, the raw score, and a Reason when req does not fit.
func Evaluate(cards []ledger.Card, mixed bool, req *request.Request, cardPolicy, nodePolicy Policy, env *Env, out []Choice) ([]Choice, int64, string) {
	start := len(out)
	frag := MeasuresFrag(nodePolicy, req, env)
	var before, cpuPerMilli float64
	opts := env.fragFit()
	if frag {
		before = fragBefore(cards, env)
		if nodePolicy == FragFit && opts.strandWeight() != 0 {
			cpuPerMilli = env.cpuPerMilli(cards)
			before += opts.strandWeight() * strandBefore(cards, env.CPULeft, env.CPUCap, cpuPerMilli, opts.StrandBeforeLeft)
		}
	}
	placed, reason := PlaceIn(cards, mixed, req, cardPolicy, env, out)
	if reason != "" {
		return placed, 0, reason
	}
	var score int64
	switch {
	case frag && nodePolicy == FGD:
		score = fgdScore(before, envFrag(cards, env, env.cpuLeftAfter()))
	case frag && nodePolicy == FragFit:
		after := envFrag(cards, env, env.cpuLeftAfter()) + opts.strandWeight()*strandAt(cards, env.cpuLeftAfter(), cpuPerMilli)
		score = fragFitRaw(before, after, cards, opts.rank(env), req.CPUOnly() && !opts.NoCPUOnlyFit)
	case req.CPUOnly() && nodePolicy == FragFit:
		// No workload learned yet: nothing to measure, so FGD's score is
		// the same everywhere and the fit decides (fewest free cards).
		score = fragFitRaw(0, 0, cards, opts.rank(env), !opts.NoCPUOnlyFit)
	case req.Class == protocol.ClassGeneral && (nodePolicy == BestFit || nodePolicy.fragAware()):
		score = bestFitScore(cards, env)
	default:
		score = NodeScore(cards, req, nodePolicy, placed[start:])
	}
	if req.Class == protocol.ClassGeneral && !mixed {
		score += Preferred
	}
	return placed, score, ""
}

// MeasuresFrag reports whether Evaluate scores the node by how req changes
// its fragmentation (Frag), which is when Env.Before applies: a general pod,
// a fragmentation-aware node policy, and a workload to measure against.
func MeasuresFrag(nodePolicy Policy, req *request.Request, env *Env) bool {
	return nodePolicy.fragAware() && req.Class == protocol.ClassGeneral && env.hasWorkload()
}

// Preferred lifts the raw score of a general pod on a node that is not
// mixed above its score on any mixed node. A mixed node's cards are the only
// ones online and offline pods can use; a general pod that takes one leaves
// those classes less room while cards they cannot use stand free elsewhere.
// So a general pod goes to a mixed node only when no other node fits: a
// preference, not a filter. Normalize ranks the nodes of the lower tier
// below every node of the top one; within a tier the policy decides.
//
// It lies above every raw score of every policy: fragfit's (at most 101·2^16
// FGD-and-fit values times RankRange, under 2^55) included.
const Preferred = int64(1) << 58

// bestFitScore is 100 less the share of the node left free after the pod,
// cards and CPU weighed alike (CPU only when the env knows it).
func bestFitScore(cards []ledger.Card, env *Env) int64 {
	var free, total int64
	for i := range cards {
		if cards[i].Healthy {
			free += CardFree(&cards[i])
			total += 1000
		}
	}
	if total == 0 {
		return 0
	}
	left := float64(free) / float64(total)
	if env != nil && env.CPUCap > 0 {
		left = (left + float64(max(env.cpuLeftAfter(), 0))/float64(env.CPUCap)) / 2
	}
	return int64((1 - left) * MaxScore)
}

// fitRange bounds the free card capacity, in milli-cards, by which fragfit
// orders the nodes of equal FGD score for a pod without cards (65 cards:
// more than any node has).
const fitRange = 1 << 16

// fragFitRaw is fragfit's raw node score (docs/performance.md#fragfit-the-shipped-default):
//
//  1. FGD's own score, the paper's truncated sigmoid of the fragmentation
//     decrease (Evaluate adds the node's Strand to FGD's Frag before and
//     after the pod): its resolution, not one chosen here.
//  2. For a pod without cards (CPU only), among the nodes FGD rates alike,
//     the node with the least free card capacity. Such a pod strands no
//     card now; what it costs is the CPU it takes, which strands a node's
//     free cards once too little CPU is left for the pods that would use
//     them (FGD counts all of a node's free cards as fragment then). The
//     fewer free cards a node has, the less that can strand: on a node
//     whose cards are all taken, nothing.
//  3. The node's fixed rank: among nodes still equal, a fixed order, so
//     pods fill them one after the other (as the paper's simulator did by
//     its node names) instead of spreading at random over them as
//     kube-scheduler's pick among equal scores would.
//
// A pod with cards is not ordered by free capacity: FGD's score already
// weighs what its cards leave behind, and ordering it by free capacity as
// well makes the nodes it fills first drift from the fixed order; in the
// trace replay that did worse on every development variant
// (docs/performance.md#fragfit-the-shipped-default).
func fragFitRaw(before, after float64, cards []ledger.Card, rank int64, cpuOnly bool) int64 {
	var fit int64
	if cpuOnly {
		var free int64
		for i := range cards {
			free += CardFree(&cards[i])
		}
		fit = fitRange - 1 - min(free, fitRange-1)
	}
	return (fgdScore(before, after)*fitRange+fit)*RankRange + rank
}

// NodeRank orders nodes first by their hash modulo rankBuckets (the order
// the replay's figures were first measured in), then by the rest of the
// hash, so that two nodes share a rank only when their names' 32-bit
// hashes collide. With the bucket alone, 300 nodes held some 45 pairs of
// equal rank: fragfit then left those ties to kube-scheduler, whose other
// score plugins break them one way and the replay's random pick another.
const (
	rankBuckets = 1000
	rankFine    = math.MaxUint32/rankBuckets + 1
	// RankRange bounds NodeRank.
	RankRange = rankBuckets * rankFine
)

// NodeRank is a node's fixed tie-break in [0, RankRange): a bijection of
// its name's hash, so every scheduler replica and the replay order nodes
// alike.
func NodeRank(name string) int64 {
	h := NameHash(name)
	return int64(h%rankBuckets)*rankFine + int64(h/rankBuckets)
}

// NameHash is the 32-bit FNV-1a hash of a name, inline so that Filter and
// Score allocate nothing.
func NameHash(name string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint32(name[i])) * 16777619
	}
	return h
}

// Normalize maps raw scores of the candidate nodes to [0, MaxScore] in place.
// Most policies stretch [lo, hi] linearly. fragfit's raw score is a total
// order (FGD's score, then the fit, then the node's rank), so its best node
// gets MaxScore and every other node 0: a node one rank below would
// otherwise score 99, and the profile's other score plugins would reorder
// the nodes FGD rates alike, spreading pods over them at random again.
func Normalize(policy Policy, scores []int64) {
	if len(scores) == 0 {
		return
	}
	// With a node in the preferred tier (Preferred), only that tier is
	// stretched, and the others score 0.
	var shift int64
	if slices.Max(scores) >= Preferred/2 {
		shift = Preferred
	}
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, s := range scores {
		if s >= shift-Preferred/2 {
			lo, hi = min(lo, s-shift), max(hi, s-shift)
		}
	}
	for i, s := range scores {
		s -= shift
		switch {
		case s < -Preferred/2:
			scores[i] = 0 // a mixed node, while another node fits
		case policy == FragFit && s == hi:
			scores[i] = MaxScore
		case policy == FragFit:
			scores[i] = 0
		case hi == lo:
			scores[i] = MaxScore
		default:
			scores[i] = (s - lo) * MaxScore / (hi - lo)
		}
	}
}
