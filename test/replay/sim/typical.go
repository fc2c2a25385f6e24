package sim

import (
	"math"
	"sort"
	"strings"
)

// popularity is the simulator's podPopularityThreshold, in percent: typical
// pods are the most frequent shapes that together make up this share of
// all pods.
const popularity = 95

// typicalShape is one of the simulator's typical pods: a pod shape keyed by
// CPU, GPU share, card count and model list, with its renormalised weight.
type typicalShape struct {
	cpu, milli int64
	num        int
	models     []string
	weight     float64
	// millis indexes typical.millis (-1 for a CPU-only shape).
	millis int
}

// typical is FGD's target workload as the simulator derives it from the trace.
type typical struct {
	shapes []typicalShape
	// millis are the distinct GPU shares of the shapes, so a node's cards
	// are read once per share, not once per shape.
	millis []int64
	// access[s][model] caches whether shape s accepts a node model.
	access []map[string]bool
}

type typicalKey struct {
	cpu, milli int64
	num        int
	models     string
}

// typicalShapes counts the trace's pod shapes, most frequent first (ties:
// the larger shape first, as the simulator's reverse sort), keeps the
// leading ones until they cover popularity of the pods and renormalises
// their weights to sum to 1.
func typicalShapes(pods []Pod) *typical {
	count := map[typicalKey]int{}
	for i := range pods {
		p := &pods[i]
		count[typicalKey{p.CPUMilli, p.GPUMilli, p.NumGPU, strings.Join(p.Models, "|")}]++
	}
	keys := make([]typicalKey, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		switch {
		case count[a] != count[b]:
			return count[a] > count[b]
		case a.cpu != b.cpu:
			return a.cpu > b.cpu
		case a.milli != b.milli:
			return a.milli > b.milli
		case a.num != b.num:
			return a.num > b.num
		}
		return a.models > b.models
	})
	t := &typical{}
	total := float64(len(pods))
	covered := 0.0
	for _, k := range keys {
		if covered >= popularity*total/100 {
			break
		}
		covered += float64(count[k])
		// The simulator's weight: the count over all pods, then over the
		// share the kept shapes cover (GetTypicalPods), in that order,
		// so the frag sums round as the simulator's do.
		s := typicalShape{cpu: k.cpu, milli: k.milli, num: k.num, weight: float64(count[k]) / total, millis: -1}
		if k.models != "" {
			s.models = strings.Split(k.models, "|")
		}
		if k.num > 0 {
			s.millis = t.milliIndex(k.milli)
		}
		t.shapes = append(t.shapes, s)
	}
	t.access = make([]map[string]bool, len(t.shapes))
	for i := range t.shapes {
		if len(t.shapes) < len(keys) {
			t.shapes[i].weight /= covered / total
		}
		t.access[i] = map[string]bool{}
	}
	return t
}

func (t *typical) milliIndex(m int64) int {
	for i, v := range t.millis {
		if v == m {
			return i
		}
	}
	t.millis = append(t.millis, m)
	return len(t.millis) - 1
}

func (t *typical) accepts(s int, model string) bool {
	ok, seen := t.access[s][model]
	if !seen {
		ok = modelAllowed(t.shapes[s].models, model)
		t.access[s][model] = ok
	}
	return ok
}

// maxMillis bounds the distinct shares counted on the stack.
const maxMillis = 128

// frag is the simulator's FragAmountSumExceptQ3 of a node: for each typical
// shape, weighted, the node's idle GPU-milli that the shape cannot use —
// all of it when the shape asks for no GPU, may not use the node's model,
// or does not fit (too few cards with room, or too little CPU); otherwise
// that of the cards with less room than the shape's share. The amounts
// are summed per kind of fragment, then the kinds in the simulator's
// order (NodeGpuShareFragAmount, FragRatioDataMap), so the sum rounds as
// the simulator's and FGD's truncated score ties where the simulator's does.
func (t *typical) frag(model string, cpuLeft int64, lefts []int64) float64 {
	var total int64
	for _, l := range lefts {
		total += l
	}
	var fit [maxMillis]int
	var stranded [maxMillis]int64
	for mi, m := range t.millis[:min(len(t.millis), maxMillis)] {
		for _, l := range lefts {
			if l >= m {
				fit[mi]++
			} else {
				stranded[mi] += l
			}
		}
	}
	var kinds [fragKinds]float64
	for si := range t.shapes {
		s := &t.shapes[si]
		kind, amount := t.fragKind(si, model, cpuLeft, fit[:]), total
		if kind == q3Satisfied {
			kind, amount = q2LackGPU, stranded[s.millis]
		}
		kinds[kind] += s.weight * float64(amount)
	}
	var f float64
	for k, v := range kinds {
		if k != q3Satisfied {
			f += v
		}
	}
	return f
}

// The simulator's kinds of fragment, in its order (FragRatioDataMap).
const (
	q1LackBoth = iota
	q2LackGPU
	q3Satisfied
	q4LackCPU
	xlSatisfied
	xrLackCPU
	noAccess
	fragKinds
)

// fragKind is the simulator's GetNodePodFrag of typical shape si on a node.
func (t *typical) fragKind(si int, model string, cpuLeft int64, fit []int) int {
	s := &t.shapes[si]
	cpuOK := cpuLeft >= s.cpu
	switch {
	case s.millis < 0 && cpuOK:
		return xlSatisfied
	case s.millis < 0:
		return xrLackCPU
	case !t.accepts(si, model):
		return noAccess
	case s.millis >= maxMillis:
		return q1LackBoth // beyond the stack's bound: counted whole, as before
	case fit[s.millis] >= s.num && cpuOK:
		return q3Satisfied
	case fit[s.millis] >= s.num:
		return q4LackCPU
	case cpuOK:
		return q2LackGPU
	}
	return q1LackBoth
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// fgdScore is the simulator's int(sigmoid(Δ/1000)·100).
func fgdScore(before, after float64) int64 { return int64(sigmoid((before-after)/1000) * 100) }

// fgd is the simulator's FGD score of node n for the pod: for a pod asking
// a share of one card, the best over the cards it fits.
func (s *portSelector) fgd(n int, pod *Pod) int64 {
	cards, model := s.cl.cards[n], s.cl.nodes[n].Model
	lefts := s.scratch[:0]
	for i := range cards {
		lefts = append(lefts, left(&cards[i]))
	}
	s.scratch = lefts
	if !s.fragOK[n] {
		s.frag[n], s.fragOK[n] = s.typical.frag(model, s.cl.cpuLeft[n], lefts), true
	}
	before, cpuAfter := s.frag[n], s.cl.cpuLeft[n]-pod.CPUMilli
	if pod.NumGPU == 1 && pod.GPUMilli < milli {
		best := int64(-1)
		for i, l := range lefts {
			if l < pod.GPUMilli || sameLeftEarlier(lefts, i) {
				continue
			}
			lefts[i] -= pod.GPUMilli
			best = max(best, fgdScore(before, s.typical.frag(model, cpuAfter, lefts)))
			lefts[i] += pod.GPUMilli
		}
		return best
	}
	need := pod.NumGPU
	for i, l := range lefts {
		if need > 0 && l == milli {
			lefts[i], need = 0, need-1
		}
	}
	return fgdScore(before, s.typical.frag(model, cpuAfter, lefts))
}

// fgdCard is the card FGD gives a pod asking a share of one on node n
// (fgd_score.go, allocateGpuIdBasedOnFGDScore through
// calculateGpuShareFragExtendScore): the first card with the best
// truncated score. allocate has already taken the pod's CPU from the node;
// the simulator's Reserve reads the node from the cycle's snapshot, before
// the pod.
func (s *portSelector) fgdCard(n int, pod *Pod) int {
	cards, model := s.cl.cards[n], s.cl.nodes[n].Model
	lefts := make([]int64, len(cards))
	for i := range cards {
		lefts[i] = left(&cards[i])
	}
	cpuAfter := s.cl.cpuLeft[n]
	before := s.typical.frag(model, cpuAfter+pod.CPUMilli, lefts)
	best, bestScore := -1, int64(0)
	for i, l := range lefts {
		if l < pod.GPUMilli {
			continue
		}
		lefts[i] -= pod.GPUMilli
		score := fgdScore(before, s.typical.frag(model, cpuAfter, lefts))
		lefts[i] += pod.GPUMilli
		if best < 0 || score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// sameLeftEarlier reports whether an earlier card has the same room: it
// scores the same.
func sameLeftEarlier(lefts []int64, i int) bool {
	for j := range i {
		if lefts[j] == lefts[i] {
			return true
		}
	}
	return false
}
