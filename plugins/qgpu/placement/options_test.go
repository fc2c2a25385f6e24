package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

// Each of FragFitOptions' switches takes away the one part of fragfit it
// names, and the zero value is fragfit as shipped.
func TestFragFitOptions(t *testing.T) {
	half := NewWorkload([]Shape{{MemoryGiB: 500, Cards: 1, CPUMilli: 4000, Weight: 1}}) // 8 CPU per milli-card
	raw := func(cards []ledger.Card, pod int64, env Env) int64 {
		t.Helper()
		r := req(general)
		if pod > 0 {
			r = req(general, shared("c", pod, 0))
		}
		_, score, reason := Evaluate(cards, false, r, FragFit, FragFit, &env, nil)
		if reason != "" {
			t.Fatal(reason)
		}
		return score
	}
	// A pod of 500 milli and 8000 CPU on four empty cards: FGD's Frag is
	// 0 before and after with 64000 or 24000 CPU left, so only the
	// stranded term tells the nodes apart: 0 before and after with 64000;
	// with 24000, 4000 free against 3000 carried before (1000 stranded),
	// 3500 against 2000 after (1500).
	strandEnv := func(cpuLeft int64, o FragFitOptions) Env {
		return Env{Workload: half, CPULeft: cpuLeft, CPUCap: 64000, PodCPU: 8000, FragFit: o}
	}
	cpuOnlyEnv := func(rank int64, o FragFitOptions) Env {
		return Env{Workload: half, CPULeft: 64000, CPUCap: 64000, PodCPU: 1000, Rank: rank, FragFit: o}
	}
	tests := []struct {
		name string
		a, b int64
		want int // the sign of a-b
	}{
		{"shipped: the stranded term prefers the roomy node",
			raw(milliCards(0, 0, 0, 0), 500, strandEnv(64000, FragFitOptions{})), raw(milliCards(0, 0, 0, 0), 500, strandEnv(24000, FragFitOptions{})), 1},
		{"weight 1 is the shipped score",
			raw(milliCards(0, 0, 0, 0), 500, strandEnv(24000, FragFitOptions{StrandWeight: 1})), raw(milliCards(0, 0, 0, 0), 500, strandEnv(24000, FragFitOptions{})), 0},
		{"NoStrand: both nodes alike",
			raw(milliCards(0, 0, 0, 0), 500, strandEnv(64000, FragFitOptions{NoStrand: true})), raw(milliCards(0, 0, 0, 0), 500, strandEnv(24000, FragFitOptions{NoStrand: true})), 0},
		{"weight 2 penalises the stranded capacity more than weight 0.5",
			raw(milliCards(0, 0, 0, 0), 500, strandEnv(24000, FragFitOptions{StrandWeight: 0.5})), raw(milliCards(0, 0, 0, 0), 500, strandEnv(24000, FragFitOptions{StrandWeight: 2})), 1},
		{"shipped: a CPU-only pod prefers the node with fewer free cards",
			raw(milliCards(1000, 0), 0, cpuOnlyEnv(0, FragFitOptions{})), raw(milliCards(0, 0), 0, cpuOnlyEnv(999, FragFitOptions{})), 1},
		{"NoCPUOnlyFit: the rank decides",
			raw(milliCards(1000, 0), 0, cpuOnlyEnv(0, FragFitOptions{NoCPUOnlyFit: true})), raw(milliCards(0, 0), 0, cpuOnlyEnv(999, FragFitOptions{NoCPUOnlyFit: true})), -1},
		{"shipped: the rank breaks a tie",
			raw(milliCards(0, 0), 0, cpuOnlyEnv(5, FragFitOptions{})), raw(milliCards(0, 0), 0, cpuOnlyEnv(4, FragFitOptions{})), 1},
		{"NoRank: the tie stays",
			raw(milliCards(0, 0), 0, cpuOnlyEnv(5, FragFitOptions{NoRank: true})), raw(milliCards(0, 0), 0, cpuOnlyEnv(4, FragFitOptions{NoRank: true})), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := 0
			switch {
			case tt.a > tt.b:
				got = 1
			case tt.a < tt.b:
				got = -1
			}
			if got != tt.want {
				t.Errorf("raw %d against %d: sign %d, want %d", tt.a, tt.b, got, tt.want)
			}
		})
	}
}

// FGDCard makes fragfit take the card FGD's score prefers
// (TestFragPoliciesPickCard: fgd takes card 0, fragfit the tightest, 1).
func TestFragFitOptionsFGDCard(t *testing.T) {
	half := NewWorkload([]Shape{{MemoryGiB: 500, Cards: 1, CPUMilli: 4000, Weight: 1}})
	for _, tt := range []struct {
		opts FragFitOptions
		want [][2]int
	}{
		{FragFitOptions{}, [][2]int{{0, 1}}},
		{FragFitOptions{FGDCard: true}, [][2]int{{0, 0}}},
	} {
		env := &Env{Workload: half, FragFit: tt.opts}
		got, reason := PlaceIn(milliCards(0, 400, 0), false, req(general, shared("c", 400, 0)), FragFit, env, nil)
		if reason != "" {
			t.Fatal(reason)
		}
		if diff := cmp.Diff(tt.want, chosen(got)); diff != "" {
			t.Errorf("%+v: %s", tt.opts, diff)
		}
	}
}
