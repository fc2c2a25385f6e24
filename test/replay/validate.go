package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

// published are the paper's simulator's 10-seed means of allocation at 130%
// arrived (seeds 42..51), per development variant of the trace and policy,
// from its published expected results. They are the check of the ports and
// nothing else: no code of the replay or of the product reads them.
var published = []struct {
	variant string
	means   map[placement.Policy]float64
}{
	{"default", map[placement.Policy]float64{sim.Random: 87.47, sim.DotProd: 90.85, sim.GpuClustering: 91.88, sim.GpuPacking: 92.00, sim.BestFit: 93.08, sim.FGD: 95.39}},
	{"gpushare40", map[placement.Policy]float64{sim.Random: 86.00, sim.DotProd: 89.56, sim.GpuClustering: 90.02, sim.GpuPacking: 90.03, sim.BestFit: 91.69, sim.FGD: 94.15}},
	{"multigpu20", map[placement.Policy]float64{sim.Random: 88.69, sim.DotProd: 92.06, sim.GpuClustering: 93.56, sim.GpuPacking: 93.71, sim.BestFit: 93.93, sim.FGD: 95.65}},
	{"gpuspec10", map[placement.Policy]float64{sim.Random: 87.43, sim.DotProd: 90.39, sim.GpuClustering: 92.18, sim.GpuPacking: 92.46, sim.BestFit: 93.30, sim.FGD: 94.95}},
	{"cpu050", map[placement.Policy]float64{sim.Random: 91.24, sim.DotProd: 93.27, sim.GpuClustering: 93.79, sim.GpuPacking: 93.72, sim.BestFit: 93.79, sim.FGD: 95.21}},
}

// nodeList is the node list's file name in a trace directory.
const nodeList = "openb_node_list_gpu_node.csv"

func podList(variant string) string { return "openb_pod_list_" + variant + ".csv" }

// validate runs every ported policy on every development variant found in
// --traces and prints, per variant and policy, the port's mean at 130%
// arrived beside the simulator's published one, then max-diff, the largest
// absolute difference.
func validate(args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("validate", flag.ContinueOnError)
	dir := fl.String("traces", "", "directory holding "+nodeList+" and the openb_pod_list_<variant>.csv files")
	seedsFlag := fl.String("seeds", "42-51", "seeds: a range A-B or a comma list")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("validate: --traces is required")
	}
	seeds, err := parseSeeds(*seedsFlag)
	if err != nil {
		return err
	}
	nodes, err := sim.ReadNodes(filepath.Join(*dir, nodeList))
	if err != nil {
		return fmt.Errorf("validate --traces %s: %w", *dir, err)
	}
	fmt.Fprintf(stdout, "ports of the paper's simulator, paper mode, %d seeds (%d..%d): allocation %% at 130%% arrived, port vs published\n",
		len(seeds), seeds[0], seeds[len(seeds)-1])
	fmt.Fprintf(stdout, "%-11s %-14s %8s %6s %9s %6s\n", "variant", "policy", "port", "sd", "published", "diff")
	maxDiff, variants := 0.0, 0
	for _, v := range published {
		pods, err := sim.ReadPods(filepath.Join(*dir, podList(v.variant)))
		if errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(stdout, "%-11s (no %s: skipped)\n", v.variant, podList(v.variant))
			continue
		}
		if err != nil {
			return err
		}
		variants++
		results := replayAll(nodes, pods, sim.Config{Mode: sim.Paper, Ties: sim.FirstNode}, sim.Ports, seeds)
		for _, p := range sim.Ports {
			s := summarize(results[p], 130)
			diff := s.mean - v.means[p]
			maxDiff = math.Max(maxDiff, math.Abs(diff))
			fmt.Fprintf(stdout, "%-11s %-14s %8.2f %6.2f %9.2f %+6.2f\n", v.variant, p, s.mean, s.sd, v.means[p], diff)
		}
	}
	if variants == 0 {
		return fmt.Errorf("validate --traces %s: no pod list of a development variant (%s, ...)", *dir, podList("default"))
	}
	fmt.Fprintf(stdout, "max-diff %.2f\n", maxDiff)
	return nil
}

// runValidate is main's entry for "replay validate ...".
func runValidate() {
	if err := validate(os.Args[2:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		os.Exit(1)
	}
}
