package sim

import (
	"math"
	"math/rand"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

// The paper's simulator's policies (hkust-adsl/kubernetes-scheduler-simulator,
// the FGD paper's artifact), ported for paper mode under the names the paper
// uses. They read a node as the simulator does: CPU left, and each card's
// GPU-milli left. docs/performance.md#validating-the-replay says how the
// ports were checked against the simulator's published results.
const (
	// Random takes a feasible node at random, and a random card that fits,
	// drawing from the seed's source after the node order as the
	// simulator does (RandomScorePlugin.PreScore, allocateGpuIdBasedOnRandomFit).
	Random placement.Policy = "Random"
	// DotProd is the simulator's Tetris-like score over (CPU, GPU) left and
	// requested, each divided by the largest node's (128 cores, 8 cards),
	// inverted as the simulator has it (a smaller product scores higher).
	DotProd placement.Policy = "DotProd"
	// GpuClustering prefers nodes whose GPU pods are all of the pod's kind
	// (a share of a card, or k whole cards), then fuller nodes.
	GpuClustering placement.Policy = "GpuClustering"
	// GpuPacking prefers sharing a used card, then free cards on a used
	// node, then an empty node.
	GpuPacking placement.Policy = "GpuPacking"
	// BestFit prefers the node with the least CPU and GPU left after the
	// pod, each over the largest node's, min-max normalized.
	BestFit placement.Policy = "BestFit"
	// FGD is fragmentation gradient descent with the simulator's truncated
	// sigmoid score; a pod asking a share of a card takes the card that
	// score prefers.
	FGD placement.Policy = "FGD"
)

// Ports lists the ported policies in the paper's order.
var Ports = []placement.Policy{Random, DotProd, GpuClustering, GpuPacking, BestFit, FGD}

// IsPort reports whether p names a ported policy.
func IsPort(p placement.Policy) bool {
	for _, q := range Ports {
		if p == q {
			return true
		}
	}
	return false
}

// The simulator's normalisers: the largest node it knows (MaxSpecCpu, MaxSpecGpu).
const (
	maxSpecCPU = 128000
	maxSpecGPU = 8000
	milli      = 1000
)

// left is a paper-mode card's GPU-milli left.
func left(c *ledger.Card) int64 { return c.MemoryGiB - c.UsedMemoryGiB }

func gpuLeft(cards []ledger.Card) (total int64) {
	for i := range cards {
		total += left(&cards[i])
	}
	return total
}

func fullyFree(cards []ledger.Card) (n int) {
	for i := range cards {
		if left(&cards[i]) == milli {
			n++
		}
	}
	return n
}

// portSelector is one replay's scheduling cycle with a ported policy.
type portSelector struct {
	cl     *cluster
	policy placement.Policy
	// order is the seed's node order, in which ties go to the first;
	// listed is the scheduler's list of nodes (by name, the order the
	// simulator creates them in), in which Random's draw indexes the
	// feasible ones.
	order, listed []int
	rng           *rand.Rand
	typical       *typical
	// affinity counts the GPU pods of each kind on each node
	// (GpuClustering): key 0 a share of a card, k for k whole cards.
	affinity []map[int]int
	// frag caches each node's fragmentation (FGD); valid until it changes.
	frag    []float64
	fragOK  []bool
	cand    []int
	scores  []int64
	scratch []int64
}

func newPortSelector(cl *cluster, policy placement.Policy, order []int, rng *rand.Rand, typ *typical) *portSelector {
	s := &portSelector{cl: cl, policy: policy, order: order, rng: rng, typical: typ,
		listed:   sortedBy(len(cl.nodes), func(i int) string { return cl.nodes[i].Name }),
		affinity: make([]map[int]int, len(cl.nodes)), frag: make([]float64, len(cl.nodes)), fragOK: make([]bool, len(cl.nodes))}
	for i := range s.affinity {
		s.affinity[i] = map[int]int{}
	}
	return s
}

// feasible is the simulator's filter: CPU and memory as NodeResourcesFit,
// then for GPU pods the model list and enough cards with room.
func (s *portSelector) feasible(n int, pod *Pod) bool {
	if s.cl.cpuLeft[n] < pod.CPUMilli || s.cl.memLeft[n] < pod.MemoryMiB {
		return false
	}
	if pod.NumGPU == 0 {
		return true
	}
	if !modelAllowed(pod.Models, s.cl.nodes[n].Model) {
		return false
	}
	fit := 0
	for i := range s.cl.cards[n] {
		if left(&s.cl.cards[n][i]) >= pod.GPUMilli {
			fit++
		}
	}
	return fit >= pod.NumGPU
}

// modelAllowed is the simulator's model check: an empty list allows any.
func modelAllowed(models []string, model string) bool {
	if len(models) == 0 {
		return true
	}
	for _, m := range models {
		if m == model {
			return true
		}
	}
	return false
}

// place schedules one pod and reports whether a node took it.
func (s *portSelector) place(pod *Pod) bool {
	s.cand, s.scores = s.cand[:0], s.scores[:0]
	nodes := s.order
	if s.policy == Random {
		nodes = s.listed
	}
	for _, n := range nodes {
		if s.feasible(n, pod) {
			s.cand = append(s.cand, n)
			s.scores = append(s.scores, s.score(n, pod))
		}
	}
	if len(s.cand) == 0 {
		return false
	}
	if s.policy == BestFit {
		normalizeMinMax(s.scores)
	}
	best := 0
	if s.policy == Random {
		// kube-scheduler scores (and RandomScore draws) only when more
		// than one node is feasible.
		if len(s.cand) > 1 {
			best = s.rng.Intn(len(s.cand))
		}
	} else {
		for k := range s.cand {
			if s.scores[k] > s.scores[best] {
				best = k // the first of equal scores: the seed's node order
			}
		}
	}
	s.allocate(s.cand[best], pod)
	return true
}

func (s *portSelector) score(n int, pod *Pod) int64 {
	cards, cpuLeft := s.cl.cards[n], s.cl.cpuLeft[n]
	switch s.policy {
	case DotProd:
		dot := (float64(cpuLeft)/maxSpecCPU*float64(pod.CPUMilli)/maxSpecCPU +
			float64(gpuLeft(cards))/maxSpecGPU*float64(pod.GPUDemand())/maxSpecGPU) / 2
		return int64(100 * (1 - dot))
	case GpuClustering:
		return clusteringScore(s.affinity[n], gpuLeft(cards), pod)
	case GpuPacking:
		return packingScore(cards, pod)
	case BestFit:
		free := float64(cpuLeft-pod.CPUMilli)/maxSpecCPU*0.5 + float64(gpuLeft(cards)-pod.GPUDemand())/maxSpecGPU*0.5
		return int64((1 - free) * 100)
	case FGD:
		return s.fgd(n, pod)
	}
	return 0
}

// normalizeMinMax is the simulator's NormalizeScore: [lo, hi] onto
// [0, 100] in integers, all 0 when every score is equal.
func normalizeMinMax(scores []int64) {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, v := range scores {
		lo, hi = min(lo, v), max(hi, v)
	}
	for i, v := range scores {
		if hi == lo {
			scores[i] = 0
		} else {
			scores[i] = (v - lo) * 100 / (hi - lo)
		}
	}
}

// affinityKey is the pod's GPU kind for GpuClustering, -1 for none.
func affinityKey(pod *Pod) int {
	switch {
	case pod.NumGPU == 0:
		return -1
	case pod.NumGPU == 1 && pod.GPUMilli < milli:
		return 0
	}
	return pod.NumGPU
}

func clusteringScore(aff map[int]int, gpuLeft int64, pod *Pod) int64 {
	key := affinityKey(pod)
	if key < 0 {
		return 0
	}
	fill := 25 * (maxSpecGPU - gpuLeft) / maxSpecGPU
	switch {
	case aff[key] > 0 && len(aff) == 1:
		return fill + 75
	case aff[key] > 0:
		return fill + 50
	case len(aff) == 0:
		return fill + 25
	}
	return fill
}

// packingScore ranks sharing a used card above taking free cards on a used
// node above an empty node, as the simulator's GpuPacking.
func packingScore(cards []ledger.Card, pod *Pod) int64 {
	if pod.NumGPU == 0 {
		return 0
	}
	free := fullyFree(cards)
	if free == len(cards) {
		return max(int64(100/3-free), int64(free))
	}
	// The pod's cards, least room first (stable by index).
	need, fromFree := pod.NumGPU, 0
	var leftOnUsed int64
	for _, i := range byLeft(cards) {
		if need == 0 {
			break
		}
		if l := left(&cards[i]); l >= pod.GPUMilli {
			need--
			leftOnUsed += l * 100 / milli
			if l == milli {
				fromFree++
			}
		}
	}
	if fromFree > 0 {
		return max(int64(50-fromFree), 100/3)
	}
	return max(100-leftOnUsed/10, 50)
}

// byLeft is the cards' indexes, least GPU left first, stable by index.
func byLeft(cards []ledger.Card) []int {
	idx := make([]int, len(cards))
	for i := range idx {
		idx[i] = i
	}
	for i := 1; i < len(idx); i++ {
		for j := i; j > 0 && left(&cards[idx[j]]) < left(&cards[idx[j-1]]); j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	return idx
}

// allocate takes the pod's cards on node n by the policy's card choice.
func (s *portSelector) allocate(n int, pod *Pod) {
	cards := s.cl.cards[n]
	s.cl.cpuLeft[n] -= pod.CPUMilli
	s.cl.memLeft[n] -= pod.MemoryMiB
	s.fragOK[n] = false
	if key := affinityKey(pod); key >= 0 {
		s.affinity[n][key]++
	}
	switch {
	case pod.NumGPU == 0:
	case pod.GPUMilli < milli:
		c := s.shareCard(n, pod)
		cards[c].Take(protocol.ClassGeneral, pod.GPUMilli, 0, true)
	default:
		need := pod.NumGPU
		for i := range cards {
			if need > 0 && left(&cards[i]) == milli {
				cards[i].Take(protocol.ClassGeneral, milli, protocol.CoresPerCard, true)
				need--
			}
		}
	}
}

// shareCard is the card a pod asking a share of one takes, as the
// simulator's Open-Gpu-Share Reserve picks it with the GpuSelMethod its
// experiment scripts configure (generate_config_and_run.py): a random card
// that fits for Random (allocateGpuIdBasedOnRandomFit), FGD's own choice
// for FGD (the script sets the method to the FGDScore plugin, whose
// allocateGpuIdBasedOnFGDScore it registers; fgdCard), and the tightest
// card, first on ties, for the others ("best": allocateGpuIdBasedOnBestFit).
func (s *portSelector) shareCard(n int, pod *Pod) int {
	cards := s.cl.cards[n]
	if s.policy == FGD {
		return s.fgdCard(n, pod)
	}
	best, seen := -1, 0
	for i := range cards {
		l := left(&cards[i])
		if l < pod.GPUMilli {
			continue
		}
		switch {
		case s.policy == Random:
			if seen++; s.rng.Intn(seen) == 0 {
				best = i
			}
		case best < 0 || l < left(&cards[best]):
			best = i
		}
	}
	return best
}
