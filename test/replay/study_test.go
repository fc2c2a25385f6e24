package main

import (
	"flag"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

// parseStudy parses args as main does and applies them for policies.
func parseStudy(args []string, policies ...placement.Policy) (sim.Config, error) {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := addStudyFlags(fs)
	var base sim.Config
	if err := fs.Parse(args); err != nil {
		return base, err
	}
	return base, f.apply(&base, policies)
}

// A bad value of a study flag is refused with the flag's name and the value.
func TestStudyFlagsRefused(t *testing.T) {
	fragfit := []placement.Policy{placement.FGD, placement.FragFit}
	tests := []struct {
		args     []string
		policies []placement.Policy
		want     []string // in the error
	}{
		{[]string{"--churn-load", "-1"}, fragfit, []string{"churn-load", "-1"}},
		{[]string{"--churn-load", "x"}, fragfit, []string{"churn-load", `"x"`}},
		{[]string{"--churn-load", "1", "--churn-window", "0"}, fragfit, []string{"churn-window", "0"}},
		{[]string{"--churn-load", "1", "--churn-warmup", "-2"}, fragfit, []string{"churn-warmup", "-2"}},
		{[]string{"--churn-load", "1"}, []placement.Policy{sim.FGD}, []string{"churn-load", "1", "FGD"}},
		{[]string{"--default-cpu-pods", "101"}, fragfit, []string{"default-cpu-pods", "101"}},
		{[]string{"--default-cpu-pods", "50"}, []placement.Policy{sim.BestFit}, []string{"default-cpu-pods", "50", "BestFit"}},
		{[]string{"--fragfit-parts", "card,rank"}, fragfit, []string{"fragfit-parts", `"card,rank"`}},
		{[]string{"--fragfit-parts", "card,card"}, fragfit, []string{"fragfit-parts", `"card,card"`}},
		{[]string{"--fragfit-parts", "strand"}, []placement.Policy{placement.FGD}, []string{"fragfit-parts", `"strand"`, "no fragfit"}},
		{[]string{"--strand-weight", "0"}, fragfit, []string{"strand-weight", "0"}},
		{[]string{"--strand-weight", "-0.5"}, fragfit, []string{"strand-weight", "-0.5"}},
		{[]string{"--salt-order"}, []placement.Policy{placement.Binpack}, []string{"salt-order", "true", "no fragfit"}},
		{[]string{"--strand-before", "free"}, fragfit, []string{"strand-before", `"free"`}},
		{[]string{"--strand-before", "left"}, []placement.Policy{placement.FGD}, []string{"strand-before", "left", "no fragfit"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := parseStudy(tt.args, tt.policies...)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// Good values reach the replay's configuration; the defaults leave the
// paper's protocol and fragfit as shipped.
func TestStudyFlagsApplied(t *testing.T) {
	tests := []struct {
		args []string
		want sim.Config
	}{
		{nil, sim.Config{}},
		{[]string{"--churn-load", "0.9", "--churn-window", "3"}, sim.Config{Churn: sim.Churn{Load: 0.9, Warmup: 1, Window: 3}}},
		{[]string{"--default-cpu-pods", "100"}, sim.Config{DefaultCPUPct: 100}},
		{[]string{"--fragfit-parts", "none"}, sim.Config{FragFit: placement.FragFitOptions{FGDCard: true, NoCPUOnlyFit: true, NoStrand: true, NoRank: true}}},
		{[]string{"--fragfit-parts", "strand, order"}, sim.Config{FragFit: placement.FragFitOptions{FGDCard: true, NoCPUOnlyFit: true}}},
		{[]string{"--strand-weight", "2", "--salt-order"}, sim.Config{FragFit: placement.FragFitOptions{StrandWeight: 2}, SaltRank: true}},
		{[]string{"--strand-before", "capacity"}, sim.Config{}},
		{[]string{"--strand-before", "left"}, sim.Config{FragFit: placement.FragFitOptions{StrandBeforeLeft: true}}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			got, err := parseStudy(tt.args, placement.FragFit)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want.Churn.Window == 0 {
				tt.want.Churn.Warmup, tt.want.Churn.Window = 1, 2 // the defaults, read only with a load
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// The churn table's difference to the last policy is taken seed by seed,
// so what the seeds share cancels out.
func TestPairedDiff(t *testing.T) {
	steadyAt := func(vs ...float64) []sim.Result {
		out := make([]sim.Result, len(vs))
		for i, v := range vs {
			out[i].Steady = &sim.Steady{Alloc: v}
		}
		return out
	}
	a, b := steadyAt(90, 94, 92), steadyAt(89, 93, 91.5)
	got := pairedDiff(a, b, func(r sim.Result) float64 { return r.Steady.Alloc })
	if math.Abs(got.mean-(1+1+0.5)/3) > 1e-9 || math.Abs(got.sd-math.Sqrt(1.0/12)) > 1e-9 {
		t.Errorf("paired difference %+v, want mean 0.833 sd 0.289", got)
	}
}
