package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

// studyFlags are the flags of the live-cluster conditions and of the
// robustness study of fragfit (docs/performance.md).
type studyFlags struct {
	churn        sim.Churn
	defaultCPU   int
	parts        string
	strandWeight float64
	saltOrder    bool
	strandBefore string
}

func addStudyFlags(fs *flag.FlagSet) *studyFlags {
	f := &studyFlags{}
	fs.Float64Var(&f.churn.Load, "churn-load", 0, "pods arrive as a Poisson process at this offered GPU load (1: the capacity) and leave after exponential lifetimes; the run is measured in steady state (0: the paper's protocol, no departures)")
	fs.Float64Var(&f.churn.Warmup, "churn-warmup", 1, "with --churn-load: mean lifetimes before the measurement starts")
	fs.Float64Var(&f.churn.Window, "churn-window", 2, "with --churn-load: mean lifetimes measured")
	fs.IntVar(&f.defaultCPU, "default-cpu-pods", 0, "percent of the CPU-only pods placed by kube-scheduler's default profile (LeastAllocated plus BalancedAllocation) instead of the policy")
	fs.StringVar(&f.parts, "fragfit-parts", "all", "the parts of fragfit kept: all, none, or a comma list of "+strings.Join(fragFitParts, ", "))
	fs.Float64Var(&f.strandWeight, "strand-weight", 1, "the weight of fragfit's stranded term")
	fs.BoolVar(&f.saltOrder, "salt-order", false, "salt fragfit's fixed node order with the seed")
	fs.StringVar(&f.strandBefore, "strand-before", "capacity", "what fragfit measures a node's stranded capacity before the pod against: capacity (a node whose cards are all free against its CPU capacity, others against the CPU left: shipped) or left (every node against the CPU left, fragfit before issue 42)")
	return f
}

// fragFitParts are --fragfit-parts' names: the tightest card, the order
// of CPU-only pods by least free card capacity, the stranded term and the
// fixed node order.
var fragFitParts = []string{"card", "cpuonly", "strand", "order"}

// parseParts reads --fragfit-parts into the options that switch the
// other parts off.
func parseParts(s string) (placement.FragFitOptions, error) {
	keep := map[string]bool{}
	switch s {
	case "all":
		return placement.FragFitOptions{}, nil
	case "none":
	default:
		for _, p := range strings.Split(s, ",") {
			p = strings.TrimSpace(p)
			if !slices.Contains(fragFitParts, p) || keep[p] {
				return placement.FragFitOptions{}, fmt.Errorf("--fragfit-parts %q: want all, none, or a comma list of distinct parts from %s", s, strings.Join(fragFitParts, ", "))
			}
			keep[p] = true
		}
	}
	return placement.FragFitOptions{FGDCard: !keep["card"], NoCPUOnlyFit: !keep["cpuonly"], NoStrand: !keep["strand"], NoRank: !keep["order"]}, nil
}

// apply checks the flags against the policies and sets them on base.
func (f *studyFlags) apply(base *sim.Config, policies []placement.Policy) error {
	if err := f.churn.Validate(); err != nil {
		return fmt.Errorf("--%w", err)
	}
	if err := sim.ValidateDefaultCPUPct(f.defaultCPU); err != nil {
		return fmt.Errorf("--%w", err)
	}
	opts, err := parseParts(f.parts)
	if err != nil {
		return err
	}
	if !(f.strandWeight > 0 && f.strandWeight <= 100) {
		return fmt.Errorf("--strand-weight %v: want above 0, at most 100 (--fragfit-parts without strand drops the term)", f.strandWeight)
	}
	if f.strandWeight != 1 {
		opts.StrandWeight = f.strandWeight
	}
	switch f.strandBefore {
	case "capacity":
	case "left":
		opts.StrandBeforeLeft = true
	default:
		return fmt.Errorf("--strand-before %q: want capacity or left", f.strandBefore)
	}
	for _, p := range policies {
		switch {
		case sim.IsPort(p) && f.churn.On():
			return fmt.Errorf("--churn-load %v: %s is a port of the simulator's policies, which replay the paper's protocol only", f.churn.Load, p)
		case sim.IsPort(p) && f.defaultCPU > 0:
			return fmt.Errorf("--default-cpu-pods %d: %s is a port of the simulator's policies, which place every pod", f.defaultCPU, p)
		}
	}
	studied := opts != placement.FragFitOptions{} || f.saltOrder
	if studied && !slices.Contains(policies, placement.FragFit) {
		return fmt.Errorf("--fragfit-parts %q, --strand-weight %v, --strand-before %s, --salt-order %v: only fragfit reads them, and --policy has no fragfit", f.parts, f.strandWeight, f.strandBefore, f.saltOrder)
	}
	base.Churn, base.DefaultCPUPct, base.FragFit, base.SaltRank = f.churn, f.defaultCPU, opts, f.saltOrder
	return nil
}

// describeStudy is the line saying which live-cluster conditions and
// which fragfit the run has, if any differs from the paper's protocol.
func describeStudy(w io.Writer, base sim.Config) {
	var parts []string
	if base.Churn.On() {
		parts = append(parts, fmt.Sprintf("churn: offered load %g, exponential lifetimes, measured over %g mean lifetimes after %g", base.Churn.Load, base.Churn.Window, base.Churn.Warmup))
	}
	if base.DefaultCPUPct > 0 {
		parts = append(parts, fmt.Sprintf("%d%% of the CPU-only pods placed by kube-scheduler's default profile", base.DefaultCPUPct))
	}
	if o := base.FragFit; o != (placement.FragFitOptions{}) || base.SaltRank {
		parts = append(parts, fmt.Sprintf("fragfit %+v, order salted per seed %v", o, base.SaltRank))
	}
	if len(parts) > 0 {
		fmt.Fprintln(w, strings.Join(parts, "; "))
	}
}

// steady is a policy's steady-state measures over the seeds.
func steady(rs []sim.Result) (alloc, rejected stat) {
	return summarizeBy(rs, func(r sim.Result) float64 { return r.Steady.Alloc }),
		summarizeBy(rs, func(r sim.Result) float64 { return r.Steady.Rejected })
}

// printSteady is the churn replay's table: per policy the time-average
// GPU allocation and the share of GPU demand rejected in the window.
func printSteady(w io.Writer, base sim.Config, policies []placement.Policy, seeds []int64, results map[placement.Policy][]sim.Result) {
	fmt.Fprintf(w, "mode %s, %d seeds (%d..%d), offered load %g: GPU allocation %% (time average) and GPU demand rejected %%, mean ± sd\n",
		base.Mode, len(seeds), seeds[0], seeds[len(seeds)-1], base.Churn.Load)
	describeStudy(w, base)
	last := policies[len(policies)-1]
	fmt.Fprintf(w, "%-10s %15s %15s %10s %10s %22s %22s\n", "policy", "allocation", "rejected", "placed", "failed",
		"allocation − "+string(last), "rejected − "+string(last))
	for _, p := range policies {
		a, r := steady(results[p])
		var placed, failed int
		for _, res := range results[p] {
			placed += res.Placed
			failed += res.Failed
		}
		// The same seed draws the same arrivals for every policy, so the
		// per-seed difference leaves out what the seeds share.
		da := pairedDiff(results[p], results[last], func(r sim.Result) float64 { return r.Steady.Alloc })
		dr := pairedDiff(results[p], results[last], func(r sim.Result) float64 { return r.Steady.Rejected })
		n := float64(len(seeds))
		fmt.Fprintf(w, "%-10s %15s %15s %10.1f %10.1f %22s %22s\n", p, fmt.Sprintf("%.2f ± %.2f", a.mean, a.sd), fmt.Sprintf("%.2f ± %.2f", r.mean, r.sd),
			float64(placed)/n, float64(failed)/n, fmt.Sprintf("%+.2f ± %.2f", da.mean, da.sd), fmt.Sprintf("%+.2f ± %.2f", dr.mean, dr.sd))
	}
}

// pairedDiff is the mean and sd over seeds of v(a) − v(b), seed by seed.
func pairedDiff(a, b []sim.Result, v func(sim.Result) float64) stat {
	d := make([]float64, len(a))
	for i := range a {
		d[i] = v(a[i]) - v(b[i])
	}
	return meanSD(d)
}

// writeSteadyCSV writes one row per policy and seed of the churn replay.
func writeSteadyCSV(path string, policies []placement.Policy, seeds []int64, results map[placement.Policy][]sim.Result) error {
	return writeRows(path, []string{"policy", "seed", "allocation_pct", "rejected_pct"}, func(w *csv.Writer) {
		for _, p := range policies {
			for i, r := range results[p] {
				_ = w.Write([]string{string(p), strconv.FormatInt(seeds[i], 10), ff(r.Steady.Alloc), ff(r.Steady.Rejected)})
			}
		}
	})
}

// reportSteady prints the churn replay's table and its last line, and
// writes its CSV under out.
func reportSteady(base sim.Config, policies []placement.Policy, seeds []int64, results map[placement.Policy][]sim.Result, out string) error {
	printSteady(os.Stdout, base, policies, seeds, results)
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if err := writeSteadyCSV(filepath.Join(out, "replay-churn-"+string(base.Mode)+".csv"), policies, seeds, results); err != nil {
			return err
		}
	}
	a, r := steady(results[policies[len(policies)-1]])
	fmt.Printf("steady allocation mean %.2f sd %.2f, rejected mean %.2f sd %.2f\n", a.mean, a.sd, r.mean, r.sd)
	return nil
}
