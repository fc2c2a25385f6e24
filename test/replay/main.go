// Command replay replays the Alibaba openb GPU trace as the FGD paper did and
// reports, per policy, the share of GPU capacity allocated as arrivals grow.
//
//	go run ./test/replay --nodes N.csv --pods P.csv --policy all --seeds 42-51 [--mode paper|qgpu] [--typical trace|online] [--out DIR]
//	go run ./test/replay --nodes N.csv --pods P.csv --typical online --failover-at 90 [--failover-learner rebuilt|cold] ...
//	go run ./test/replay ... [--churn-load 1 [--churn-warmup 1] [--churn-window 2]] [--default-cpu-pods 100]
//	go run ./test/replay ... --policy fragfit [--fragfit-parts card,cpuonly,strand,order] [--strand-weight 1] [--strand-before capacity|left] [--salt-order]
//	go run ./test/replay validate --traces DIR [--seeds 42-51]
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

// checkpoints are the arrival percentages the table reports.
var checkpoints = []int{100, 110, 120, 130}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "validate" {
		runValidate()
		return
	}
	nodesPath := flag.String("nodes", "", "node list CSV (openb_node_list_gpu_node.csv)")
	podsPath := flag.String("pods", "", "pod list CSV (openb_pod_list_default.csv)")
	policyFlag := flag.String("policy", "default", "policy, comma list, all, or default (what --profile configures for general pods; with all, it comes last)")
	profile := flag.String("profile", sim.DefaultProfile, "the scheduler profile --policy default reads")
	seedsFlag := flag.String("seeds", "42-51", "seeds: a range A-B or a comma list")
	modeFlag := flag.String("mode", string(sim.Paper), "paper (GPU-milli only) or qgpu (the qGPU accounting of docs/design.md)")
	ties := flag.String("ties", string(sim.FirstNode), "among equal best nodes: first (the paper's simulator) or random (kube-scheduler)")
	typical := flag.String("typical", string(sim.FromTrace), "typical pod shapes of fgd and fragfit: trace (the whole pod list, the simulator) or online (learned from the pods placed, from none, as the scheduler does)")
	out := flag.String("out", "", "directory for replay.csv and replay.png (none if empty)")
	var classes sim.Classes
	flag.IntVar(&classes.MixedPct, "mixed-nodes", 0, "qgpu mode: percent of nodes labelled mixed (online and offline pods fit only there)")
	flag.IntVar(&classes.SharedPct, "class-pods", 0, "qgpu mode: percent of the pods taking part of one card that are online or offline (half each)")
	flag.BoolVar(&classes.MixedAlike, "mixed-alike", false, "qgpu mode: general pods treat mixed nodes as any other (the baseline: without keeping off them)")
	var failover sim.Failover
	flag.IntVar(&failover.Pct, "failover-at", 0, "with --typical online: the scheduler fails over once this % of the GPU capacity is allocated; prints the allocation@130 with it minus without as 'failover diff X' (0: no failover)")
	flag.StringVar((*string)(&failover.Learner), "failover-learner", string(sim.Rebuilt), "what the new scheduler's learner starts from: rebuilt (every bound pod, as the plugin) or cold (none, the plugin before 2026-11-27)")
	study := addStudyFlags(flag.CommandLine)
	flag.Parse()
	policies, err := parsePolicies(*policyFlag, *profile, sim.Mode(*modeFlag))
	base := sim.Config{Mode: sim.Mode(*modeFlag), Ties: sim.TieBreak(*ties), Typical: sim.Typical(*typical), Classes: classes, MaxArrivalPct: 130, Failover: failover}
	if err == nil {
		err = study.apply(&base, policies)
	}
	if err == nil {
		err = run(*nodesPath, *podsPath, policies, *seedsFlag, base, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		os.Exit(1)
	}
}

// run replays every policy and seed with base's mode, tie-break and source
// of typical shapes.
func run(nodesPath, podsPath string, policies []placement.Policy, seedsFlag string, base sim.Config, out string) error {
	mode := base.Mode
	if base.Ties != sim.FirstNode && base.Ties != sim.RandomTie {
		return fmt.Errorf("--ties %q: want first or random", base.Ties)
	}
	if mode != sim.Paper && mode != sim.QGPU {
		return fmt.Errorf("--mode %q: want paper or qgpu", mode)
	}
	if err := base.Classes.Validate(); err != nil {
		return fmt.Errorf("--%w", err)
	}
	if mode == sim.Paper && base.Classes != (sim.Classes{}) {
		return fmt.Errorf("--mixed-nodes, --class-pods and --mixed-alike: qgpu mode only (the paper has no online and offline pods)")
	}
	if base.Typical != sim.FromTrace && base.Typical != sim.Online {
		return fmt.Errorf("--typical %q: want trace or online", base.Typical)
	}
	if err := checkFailover(base.Failover, base.Typical, policies); err != nil {
		return err
	}
	seeds, err := parseSeeds(seedsFlag)
	if err != nil {
		return err
	}
	nodes, err := sim.ReadNodes(nodesPath)
	if err != nil {
		return err
	}
	pods, err := sim.ReadPods(podsPath)
	if err != nil {
		return err
	}
	failover := base.Failover
	base.Failover = sim.Failover{}
	results := replayAll(nodes, pods, base, policies, seeds)
	if base.Churn.On() {
		err = reportSteady(base, policies, seeds, results, out)
	} else {
		err = reportCurve(base, policies, seeds, results, out, plotTitle(podsPath, mode, seedsFlag))
	}
	if err != nil {
		return err
	}
	if failover.Pct > 0 {
		base.Failover = failover
		printFailover(os.Stdout, failover, policies, seeds, results, replayAll(nodes, pods, base, policies, seeds))
	}
	return nil
}

// parsePolicies reads --policy: names (the product's policies, and in
// paper mode the simulator's ported ones), "all" (every policy of the
// mode, the shipped default last) or "default" (the policy of the profile
// file).
func parsePolicies(s, profile string, mode sim.Mode) ([]placement.Policy, error) {
	if s == "default" || s == "all" {
		def, err := sim.ProfilePolicy(profile)
		if err != nil {
			err = fmt.Errorf("--%w", err)
		}
		if err != nil || s == "default" {
			return []placement.Policy{def}, err
		}
		var out []placement.Policy
		if mode == sim.Paper {
			out = append(out, sim.Ports...)
		}
		for _, p := range placement.Policies {
			if p != def {
				out = append(out, p)
			}
		}
		return append(out, def), nil
	}
	var out []placement.Policy
	for _, name := range strings.Split(s, ",") {
		p := placement.Policy(strings.TrimSpace(name))
		switch {
		case sim.IsPort(p) && mode != sim.Paper:
			return nil, fmt.Errorf("--policy %q: the simulator's policies run in --mode paper only (in qgpu mode, fgd is FGD on the product's accounting)", p)
		case !p.Valid() && !sim.IsPort(p):
			return nil, fmt.Errorf("--policy %q: want one of %v, in paper mode %v, all or default", p, placement.Policies, sim.Ports)
		}
		out = append(out, p)
	}
	return out, nil
}

func parseSeeds(s string) ([]int64, error) {
	var out []int64
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseInt(strings.TrimSpace(lo), 10, 64)
		b := a
		if err == nil && isRange {
			b, err = strconv.ParseInt(strings.TrimSpace(hi), 10, 64)
		}
		if err != nil || b < a {
			return nil, fmt.Errorf("--seeds %q: want A-B or a comma list of integers", s)
		}
		for v := a; v <= b; v++ {
			out = append(out, v)
		}
	}
	return out, nil
}

// replayAll runs every policy and seed, GOMAXPROCS at a time, with base's
// mode, tie-break, source of typical shapes, classes and arrival limit.
func replayAll(nodes []sim.Node, pods []sim.Pod, base sim.Config, policies []placement.Policy, seeds []int64) map[placement.Policy][]sim.Result {
	results := map[placement.Policy][]sim.Result{}
	for _, p := range policies {
		results[p] = make([]sim.Result, len(seeds))
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, p := range policies {
		for i, seed := range seeds {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				cfg := base
				cfg.Nodes, cfg.Pods, cfg.Policy, cfg.Seed = nodes, pods, p, seed
				r := sim.Run(cfg)
				mu.Lock()
				results[p][i] = r
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	return results
}
