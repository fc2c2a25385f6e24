package placement

import (
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

// fragUncached is Frag as it was before Workload.room and Workload.accepts:
// every shape checks every card, its model by request.MatchesModel.
func fragUncached(cards []ledger.Card, cpuLeft int64, cpuKnown bool, w *Workload) float64 {
	var total int64
	for i := range cards {
		total += CardFree(&cards[i])
	}
	var fit [maxGPUShapes]int
	var stranded [maxGPUShapes]int64
	for gi := range w.gpu {
		g := &w.gpu[gi]
		for i := range cards {
			c := &cards[i]
			fits := g.filter.MatchesModel(c.Model)
			switch {
			case !fits:
			case g.whole:
				fits = c.Empty() && c.Fits(protocol.ClassGeneral, g.memoryGiB, protocol.CoresPerCard, true)
			default:
				fits = c.Fits(protocol.ClassGeneral, g.memoryGiB, g.cores, true)
			}
			if fits {
				fit[gi]++
			} else {
				stranded[gi] += CardFree(c)
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

// The models the random cases draw from: the trace's names, product names
// that filters match by substring, and a non-ASCII one.
var (
	randModels  = []string{"T4", "V100M16", "V100M32", "P100", "G2", "Tesla-T4", "Tesla V100-SXM2-32GB", "NVIDIA A100-SXM4-80GB", "NVIDIA Ä100"}
	randFilters = [][]string{nil, {"t4"}, {"v100m16", "v100m32"}, {"p100", "v100"}, {"g2", "p100", "t4"}, {"a100"}, {"ä100"}, {"tesla"}}
)

func randWorkload(rng *rand.Rand, n int) *Workload {
	shapes := make([]Shape, n)
	for i := range shapes {
		s := Shape{CPUMilli: int64(rng.Intn(16)) * 1000, Weight: rng.Float64()}
		switch k := rng.Intn(10); {
		case k == 0: // CPU only
		case k == 1:
			s.Cards, s.Whole, s.MemoryGiB, s.Cores = 1+rng.Intn(4), true, int64(8+rng.Intn(24)), 100
		default:
			s.Cards, s.MemoryGiB, s.Cores = 1, int64(1+rng.Intn(31)), int64(5*(1+rng.Intn(19)))
		}
		if s.Cards > 0 && rng.Intn(3) == 0 {
			s.UseTypes = randFilters[rng.Intn(len(randFilters))]
		}
		if s.Cards > 0 && rng.Intn(8) == 0 {
			s.NoUseTypes = randFilters[1+rng.Intn(len(randFilters)-1)]
		}
		shapes[i] = s
	}
	return NewWorkload(shapes)
}

// randCards is a node of n cards of one or two models, partly taken by
// general, online and offline pods, some unhealthy.
func randCards(rng *rand.Rand, n int) []ledger.Card {
	models := []string{randModels[rng.Intn(len(randModels))], randModels[rng.Intn(len(randModels))]}
	out := make([]ledger.Card, n)
	for i := range out {
		c := ledger.Card{Index: i, Model: models[min(i*2/max(n, 1), rng.Intn(2))], MemoryGiB: 32, Healthy: rng.Intn(20) != 0, MaxPods: 8}
		switch k := rng.Intn(6); {
		case k == 0:
			c.Take(protocol.ClassOnline, int64(1+rng.Intn(8)), 0, true)
		case k == 1:
			c.Take(protocol.ClassOffline, int64(1+rng.Intn(8)), 20, true)
		case k < 4:
			for range 1 + rng.Intn(4) {
				if mem, cores := int64(1+rng.Intn(10)), int64(5*(1+rng.Intn(10))); c.Fits(protocol.ClassGeneral, mem, cores, true) {
					c.Take(protocol.ClassGeneral, mem, cores, true)
				}
			}
		}
		out[i] = c
	}
	return out
}

// TestFragCachedIsUncached: Frag with its remembered model answers and
// per-demand room checks is, to the bit, the measure per shape and card, on
// random workloads (model filters, whole and multi-card shapes, CPU-only
// ones) and random nodes (mixed models, taken and unhealthy cards), each
// asked twice so that the second answer comes from what the first
// remembered; and the remembered CPU per milli-card is the worked-out one.
func TestFragCachedIsUncached(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for wi := range 200 {
		w := randWorkload(rng, 1+rng.Intn(3*MaxShapes/2))
		for ni := range 20 {
			cards := randCards(rng, 1+rng.Intn(10))
			cpuLeft, cpuKnown := int64(rng.Intn(20))*1000-2000, rng.Intn(4) != 0
			want := fragUncached(cards, cpuLeft, cpuKnown, w)
			for try := range 2 {
				if got := Frag(cards, cpuLeft, cpuKnown, w); got != want {
					t.Fatalf("workload %d node %d try %d: Frag = %v, uncached %v", wi, ni, try, got, want)
				}
			}
			mem := int64(1 + rng.Intn(80))
			if got, want := w.cpuPerMilli(mem), w.cpuPerMilliOf(mem); got != want {
				t.Fatalf("workload %d: cpuPerMilli(%d) = %v, worked out %v", wi, mem, got, want)
			}
		}
	}
}

// TestEvaluateCachedIsUncached: Evaluate's choices, score and reason on a
// workload whose answers are remembered equal those on a fresh copy of it,
// which works every answer out, for every policy.
func TestEvaluateCachedIsUncached(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	for wi := range 50 {
		warm := randWorkload(rng, 1+rng.Intn(100))
		for ni := range 40 {
			base := randCards(rng, 1+rng.Intn(8))
			mem, cores := int64(1+rng.Intn(12)), int64(5*(1+rng.Intn(10)))
			r := req(general, shared("c", mem, cores))
			if rng.Intn(3) == 0 {
				r.UseTypes = randFilters[1+rng.Intn(len(randFilters)-1)]
			}
			for _, p := range Policies {
				env := Env{CPULeft: int64(rng.Intn(64)) * 1000, CPUCap: 64000, PodCPU: 4000, Rank: int64(ni)}
				evaluate := func(w *Workload) string {
					e := env
					e.Workload = w
					cards := append([]ledger.Card(nil), base...)
					choices, score, reason := Evaluate(cards, false, r, p, p, &e, nil)
					return fmt.Sprint(choices, score, reason)
				}
				fresh := &Workload{gpu: warm.gpu, shapes: warm.shapes, demands: warm.demands, filtered: warm.filtered}
				if got, want := evaluate(warm), evaluate(fresh); got != want {
					t.Fatalf("workload %d node %d %s: remembered %s, fresh %s", wi, ni, p, got, want)
				}
			}
		}
	}
}

// TestWorkloadCaps: a workload keeps its MaxShapes heaviest shapes of at
// most maxGPUShapes card demands; the rest are left out and the weights of
// those kept sum to 1.
func TestWorkloadCaps(t *testing.T) {
	var shapes []Shape
	// 100 card demands (one shape each), the heaviest first, then 100 CPU
	// variants of the heaviest demand, lighter, then CPU-only shapes.
	for i := range 100 {
		shapes = append(shapes, Shape{MemoryGiB: int64(i + 1), Cores: 10, Cards: 1, CPUMilli: 1000, Weight: float64(1000 - i)})
	}
	for i := range 100 {
		shapes = append(shapes, Shape{MemoryGiB: 1, Cores: 10, Cards: 1, CPUMilli: int64(2000 + i), Weight: float64(500 - i)})
	}
	shapes = append(shapes, Shape{CPUMilli: 500, Weight: 1})
	w := NewWorkload(shapes)
	if len(w.gpu) != maxGPUShapes || w.Len() != MaxShapes {
		t.Fatalf("%d card demands and %d shapes, want %d and %d", len(w.gpu), w.Len(), maxGPUShapes, MaxShapes)
	}
	var sum float64
	for _, s := range w.shapes {
		sum += s.weight
		if s.gpu < 0 {
			t.Errorf("the lightest shape (CPU only) was kept")
		}
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Errorf("weights sum to %v, want 1", sum)
	}
	// The heaviest: the first 64 demands, and of the rest the shapes of the
	// first demand (its CPU variants, weights 500 down to 437).
	for _, g := range w.gpu {
		if g.memoryGiB > maxGPUShapes {
			t.Errorf("kept demand of %d GiB, lighter than the %d heaviest", g.memoryGiB, maxGPUShapes)
		}
	}
}

// TestAcceptsRemembersBounded: a workload remembers at most maxModels card
// models, and answers rightly past them; concurrent callers agree.
func TestAcceptsRemembersBounded(t *testing.T) {
	w := NewWorkload([]Shape{{MemoryGiB: 1, Cards: 1, Weight: 1, UseTypes: []string{"v100"}}, {MemoryGiB: 1, Cards: 1, Weight: 1}})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2 * maxModels {
				model := fmt.Sprintf("model-%d", i)
				want := uint64(0b10)
				if i%2 == g%2 {
					model = fmt.Sprintf("Tesla-V100-%d", i)
					want = 0b11
				}
				if got := w.accepts(model); got != want {
					t.Errorf("accepts(%q) = %b, want %b", model, got, want)
				}
			}
		}()
	}
	wg.Wait()
	if n := len(*w.accepted.Load()); n > maxModels {
		t.Errorf("%d models remembered, want at most %d", n, maxModels)
	}
}
