package sim

import (
	"math/rand"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

// A Stepper that follows another's choices with PlaceOn stays in its state:
// every choice is among its best nodes, it takes the same cards, and both
// end with the same allocation. The integration test relies on this to
// follow the real scheduler.
func TestStepperFollows(t *testing.T) {
	nodes, pods := load(t)
	lead := NewStepper(QGPU, nodes, placement.FragFit, 1)
	follow := NewStepper(QGPU, nodes, placement.FragFit, 2)
	var placed, failed int
	for _, i := range Arrivals(pods, int64(totalGPUs(nodes))*milli, 130, rand.New(rand.NewSource(42))) {
		p := &pods[i]
		req := lead.Request(p)
		best := follow.Best(p, req)
		before := make([][]ledger.Card, len(nodes))
		for k, c := range lead.sel.cl.cards {
			before[k] = slices.Clone(c)
		}
		n := lead.Place(p, req)
		if n < 0 {
			if len(best) > 0 {
				t.Fatalf("pod %s: lead placed it nowhere, follower's best %v", p.Name, best)
			}
			failed++
			continue
		}
		if !slices.Contains(best, n) {
			t.Fatalf("pod %s: lead chose node %d, follower's best %v", p.Name, n, best)
		}
		cards, ok := follow.PlaceOn(n, p, req)
		if !ok {
			t.Fatalf("pod %s does not fit node %d in the follower", p.Name, n)
		}
		if want := changedCards(before[n], lead.sel.cl.cards[n]); !slices.Equal(want, cards) {
			t.Fatalf("pod %s on node %d: follower took cards %v, lead %v", p.Name, n, cards, want)
		}
		placed++
	}
	if placed == 0 || failed == 0 {
		t.Fatalf("placed %d, failed %d: at 130%% arrivals some pods must fail", placed, failed)
	}
	if lead.Allocation() != follow.Allocation() {
		t.Fatalf("allocation: lead %.2f%%, follower %.2f%%", lead.Allocation(), follow.Allocation())
	}
	if diff := cmp.Diff(lead.sel.cl.cards, follow.sel.cl.cards); diff != "" {
		t.Fatalf("cards differ (-lead +follower):\n%s", diff)
	}
}

// The stepper starts cold, as a scheduler that just started: no typical
// shapes until a pod was placed; a CPU-only pod is a shape of its own, as
// the scheduler's learner counts it.
func TestStepperStartsCold(t *testing.T) {
	nodes, pods := load(t)
	s := NewStepper(QGPU, nodes, placement.FragFit, 1)
	if s.sel.workload() != nil {
		t.Fatal("typical shapes before any pod")
	}
	cpuOnly, gpu := -1, -1
	for i := range pods {
		switch {
		case pods[i].NumGPU == 0 && cpuOnly < 0:
			cpuOnly = i
		case pods[i].NumGPU == 1 && pods[i].GPUMilli < 1000 && gpu < 0:
			gpu = i
		}
	}
	s.Place(&pods[cpuOnly], s.Request(&pods[cpuOnly]))
	if w := s.sel.workload(); w == nil || w.Len() != 1 {
		t.Fatalf("after one CPU-only pod: %v, want one typical shape", w)
	}
	s.Place(&pods[gpu], s.Request(&pods[gpu]))
	if w := s.sel.workload(); w.Len() != 2 {
		t.Fatalf("after a GPU pod: %d shapes, want 2", w.Len())
	}
}

func totalGPUs(nodes []Node) (n int) {
	for i := range nodes {
		n += nodes[i].GPUs
	}
	return n
}

func changedCards(before, after []ledger.Card) []int {
	var out []int
	for i := range after {
		if after[i] != before[i] {
			out = append(out, after[i].Index)
		}
	}
	return out
}
