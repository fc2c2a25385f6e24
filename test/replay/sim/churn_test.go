package sim

import (
	"math"
	"math/rand"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

// churnArrivals is seeded, and its draws have the means it promises: the
// arrival rate of the offered load, lifetimes of mean 1, a starting
// population of mean rate×1, and the offered load itself.
func TestChurnArrivals(t *testing.T) {
	nodes, pods := load(t)
	var capacity, demand int64
	for i := range nodes {
		capacity += int64(nodes[i].GPUs) * milli
	}
	for i := range pods {
		demand += pods[i].GPUDemand()
	}
	for _, tt := range []struct {
		name string
		c    Churn
	}{
		{"load 0.5", Churn{Load: 0.5, Warmup: 10, Window: 40}},
		{"load 1", Churn{Load: 1, Warmup: 10, Window: 40}},
		{"load 2", Churn{Load: 2, Warmup: 0, Window: 30}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := churnArrivals(pods, capacity, tt.c, rand.New(rand.NewSource(7)))
			if !cmp.Equal(a, churnArrivals(pods, capacity, tt.c, rand.New(rand.NewSource(7))), cmp.AllowUnexported(arrival{})) {
				t.Fatal("the same seed drew other arrivals")
			}
			if cmp.Equal(a, churnArrivals(pods, capacity, tt.c, rand.New(rand.NewSource(8))), cmp.AllowUnexported(arrival{})) {
				t.Fatal("another seed drew the same arrivals")
			}
			rate := tt.c.Load * float64(capacity) * float64(len(pods)) / float64(demand)
			end := tt.c.Warmup + tt.c.Window
			var start, later int
			var life, offered float64
			for i, x := range a {
				if x.at == 0 {
					start++
				} else {
					later++
					offered += float64(pods[x.pod].GPUDemand()) * x.life
				}
				if i > 0 && x.at < a[i-1].at || x.at >= end || x.pod < 0 || x.pod >= len(pods) {
					t.Fatalf("arrival %d at %v of pod %d: want ordered times in [0, %v) of a trace pod", i, x.at, x.pod, end)
				}
				life += x.life
			}
			within(t, "arrival rate", float64(later)/end, rate, 0.03)
			within(t, "mean lifetime", life/float64(len(a)), 1, 0.03)
			within(t, "starting population", float64(start), rate, 4/math.Sqrt(rate))
			within(t, "offered load", offered/end/float64(capacity), tt.c.Load, 0.05)
		})
	}
}

func within(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if math.Abs(got-want) > rel*want {
		t.Errorf("%s %.4g, want %.4g within %.0f%%", what, got, want, rel*100)
	}
}

// The meter integrates the allocation over the window only, and counts
// the demand that arrived in it.
func TestSteadyMeter(t *testing.T) {
	m := &steadyMeter{from: 1, to: 3}
	m.advance(0.5, 0)
	m.arrived(0.5, 100, true) // before the window: not counted
	m.advance(2, 100)         // 100 over [1, 2]
	m.arrived(2, 300, true)
	m.arrived(2, 200, false)
	m.advance(4, 400) // 400 over [2, 3]; [3, 4] is past the window
	got := m.steady(1000)
	want := Steady{Alloc: (100 + 400) / 2.0 * 100 / 1000, Rejected: 200 * 100 / 500.0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
}

// Every pod placed and then released, in any order, leaves the cluster as
// it was: cards, CPU and memory, whichever policy or kube-scheduler's
// default profile placed it.
func TestReleaseRestoresCluster(t *testing.T) {
	nodes, pods := load(t)
	for _, mode := range []Mode{Paper, QGPU} {
		for _, policy := range []placement.Policy{placement.FragFit, placement.FGD, placement.Binpack} {
			for _, pct := range []int{0, 100} {
				conv := NewConverter(mode, nodes)
				cl := newCluster(mode, nodes)
				order := NodeOrder(nodes, rand.New(rand.NewSource(1)))
				s := newSelector(cl, policy, conv.Workload(pods), order, rand.New(rand.NewSource(2)), RandomTie)
				s.keep, s.defaultPct, s.kubeRng = true, pct, rand.New(rand.NewSource(3))
				var holds []holding
				for i := range pods {
					if h, ok := s.placeHolding(&pods[i], conv.Request(&pods[i])); ok {
						holds = append(holds, h)
					}
				}
				rand.New(rand.NewSource(4)).Shuffle(len(holds), func(i, j int) { holds[i], holds[j] = holds[j], holds[i] })
				for _, h := range holds {
					s.release(h)
				}
				if diff := cmp.Diff(newCluster(mode, nodes), cl, cmp.AllowUnexported(cluster{})); diff != "" {
					t.Errorf("%s %s, %d%% by default: after %d pods placed and released: %s", mode, policy, pct, len(holds), diff)
				}
			}
		}
	}
}

// A failover after departures rebuilds the learner from the pods still
// bound only.
func TestFailoverForgetsDepartedPods(t *testing.T) {
	nodes := []Node{{Name: "n", CPUMilli: 64000, MemoryMiB: 1 << 20, GPUs: 4, Model: "T4"}}
	conv := NewConverter(Paper, nodes)
	s := newSelector(newCluster(Paper, nodes), placement.FragFit, nil, []int{0}, rand.New(rand.NewSource(1)), FirstNode)
	s.keep = true
	s.failover(Cold)
	a := Pod{Name: "a", CPUMilli: 4000, MemoryMiB: 1, NumGPU: 1, GPUMilli: 500}
	b := Pod{Name: "b", CPUMilli: 8000, MemoryMiB: 1, NumGPU: 1, GPUMilli: 1000}
	if _, ok := s.placeHolding(&a, conv.Request(&a)); !ok {
		t.Fatal("a does not fit")
	}
	hb, ok := s.placeHolding(&b, conv.Request(&b))
	if !ok {
		t.Fatal("b does not fit")
	}
	shapes := func() int {
		s.failover(Rebuilt)
		return s.learner.Load().Len()
	}
	if n := shapes(); n != 2 {
		t.Fatalf("rebuilt from two bound pods of two shapes: %d shapes", n)
	}
	s.release(hb)
	if n := shapes(); n != 1 {
		t.Errorf("rebuilt after b left: %d shapes, want 1 (a's)", n)
	}
}

// A churn replay is seeded; at a low load everything fits and the
// time-average allocation is the offered load (Little's law); at twice
// the capacity some demand is rejected and the allocation stays below 100.
func TestChurnReplay(t *testing.T) {
	nodes, pods := load(t)
	for _, tt := range []struct {
		load             float64
		rejected         bool
		allocLo, allocHi float64
	}{
		{0.3, false, 27, 33},
		{2, true, 60, 100},
	} {
		for _, policy := range []placement.Policy{placement.FragFit, placement.FGD, placement.Binpack} {
			cfg := Config{Nodes: nodes, Pods: pods, Mode: Paper, Policy: policy, Seed: 42, Churn: Churn{Load: tt.load, Warmup: 2, Window: 20}}
			r := Run(cfg)
			if !cmp.Equal(r, Run(cfg)) {
				t.Fatalf("%s load %v: the same seed gave another result", policy, tt.load)
			}
			st := r.Steady
			t.Logf("%s load %v: %+v, %d placed, %d failed", policy, tt.load, *st, r.Placed, r.Failed)
			if st == nil || st.Alloc < tt.allocLo || st.Alloc > tt.allocHi || (st.Rejected > 0) != tt.rejected {
				t.Errorf("%s load %v: %+v, want allocation in [%v, %v], rejected %v", policy, tt.load, st, tt.allocLo, tt.allocHi, tt.rejected)
			}
		}
	}
}
