// Command throughput is a scheduler_perf-style measurement: a real
// kube-apiserver and etcd (harness.StartControlPlane), the qgpu-scheduler run
// in-process (app.Setup + app.Run with command.Options(), leader election
// off) with two profiles, N nodes of 8 cards, and M pods created through the
// API for each profile in turn: fractional qGPU pods for the qgpu-scheduler
// profile of config/qgpu-scheduler.yaml (synthetic ones, or with --pods-from
// the openb trace's pods, model filters included, on nodes of its card
// models), and for a stock profile (default plugins only) the same pods as a
// cluster without qGPU runs them: each card share a whole nvidia.com/gpu,
// the model filter a node affinity (synthetic: one whole nvidia.com/gpu,
// nothing else). It prints pods/s
// for each, from the first create to the last bind seen by a watch, per
// round the ratio qgpu pods/s ÷ stock pods/s, and as its last line their
// geometric mean: ratio <x>.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

func main() {
	nodes := flag.Int("nodes", 500, "nodes, 8 cards each")
	pods := flag.Int("pods", 4000, "pods per profile")
	profile := flag.String("profile", "config/qgpu-scheduler.yaml", "the qgpu-scheduler profile (relative to the repository root)")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up on a phase after this long, reporting what was bound")
	podsFrom := flag.String("pods-from", "", "an openb pod list CSV (openb_pod_list_*.csv, the node list openb_node_list_gpu_node.csv beside it): the qgpu-scheduler phase's pods are the trace's (card share, model filter, CPU, memory; pods without cards included) and the nodes have the trace's card models; default: synthetic pods on V100 nodes")
	stockBare := flag.Bool("stock-bare", false, "with --pods-from, the stock phase's pods still ask for one whole nvidia.com/gpu and nothing else (no CPU, memory or model filter), as before 2026-11-27: that compares the trace's pods with bare ones, not the plugin with the stock profile")
	rounds := flag.Int("rounds", 4, "rounds of both phases, back to back, the order alternating; the ratio is the geometric mean of the rounds' ratios")
	flag.StringVar(&cpuProfileDir, "cpuprofile-dir", "", "write a CPU profile of each phase (apiserver, etcd and scheduler together) to DIR/<round>-<profile>.pprof, and a heap profile after its cleanup to DIR/<round>-<profile>.heap")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w := syntheticWorkload()
	if *podsFrom != "" {
		var err error
		if w, err = traceWorkload(*podsFrom); err != nil {
			fmt.Fprintln(os.Stderr, "throughput: --pods-from:", err)
			os.Exit(2)
		}
		if *stockBare {
			w.stockPod = stockPod
			w.describe += "; stock phase: bare pods of one nvidia.com/gpu"
		}
	}
	if err := run(ctx, w, *nodes, *pods, *profile, *timeout, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "throughput:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w workload, nodes, pods int, profile string, timeout time.Duration, rounds int) error {
	start, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cp, err := harness.StartControlPlane(start, harness.ControlPlaneOptions{})
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer cp.Stop()
	client, err := fastClient(cp)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := createNodes(ctx, client, w, nodes); err != nil {
		return err
	}
	fmt.Printf("%d %s; created in %s\n", nodes, w.describe, time.Since(t0).Round(time.Millisecond))
	schedCtx, stopSched := context.WithCancel(ctx)
	done, err := startScheduler(schedCtx, cp, profile)
	if err != nil {
		stopSched()
		return err
	}
	defer func() { stopSched(); <-done }()
	phases := []phase{
		{name: "qgpu-scheduler", scheduler: qgpuScheduler, pod: w.pod, settle: w.settle},
		{name: "stock", scheduler: stockScheduler, pod: w.stockPod, settle: w.settle},
	}
	best := make([]float64, len(phases))
	var ratios []float64
	for round := 1; round <= rounds; round++ {
		rates := make([]float64, len(phases))
		// Even rounds run the stock phase first, so that neither profile
		// always follows the other's cleanup.
		for k := range phases {
			i := k
			if round%2 == 0 {
				i = len(phases) - 1 - k
			}
			r, err := runPhase(ctx, client, phases[i], round, nodes, pods, timeout)
			if err != nil {
				return err
			}
			rates[i] = r.rate()
			best[i] = max(best[i], r.rate())
		}
		ratios = append(ratios, rates[0]/rates[1])
		fmt.Printf("round %d ratio %.3f\n", round, rates[0]/rates[1])
	}
	for i, ph := range phases {
		fmt.Printf("%-15s best %.1f pods/s\n", ph.name, best[i])
	}
	fmt.Printf("best-of ratio %.3f\n", best[0]/best[1])
	// Each round's two phases run back to back, so a slow spell of the
	// machine hits both, and the order alternates, so over an even number of
	// rounds the geometric mean of the rounds' ratios cancels a constant
	// factor that running second costs.
	logSum := 0.0
	for _, r := range ratios {
		logSum += math.Log(r)
	}
	fmt.Printf("ratio %.3f\n", math.Exp(logSum/float64(len(ratios))))
	return nil
}

// runPhase measures one phase (profiled when -cpuprofile-dir is set) and
// deletes its pods.
func runPhase(ctx context.Context, client kubernetes.Interface, ph phase, round, nodes, pods int, timeout time.Duration) (result, error) {
	// Every phase starts from a collected heap (apiserver, etcd and
	// scheduler share this process), as testing.B does before a benchmark.
	runtime.GC()
	stopProfile, err := startProfile(round, ph.name)
	if err != nil {
		return result{}, err
	}
	before := readCounts(ph.scheduler)
	r, err := measure(ctx, client, ph, pods, timeout)
	stopProfile()
	tried := readCounts(ph.scheduler).since(before)
	if err != nil {
		return result{}, fmt.Errorf("%s: %w", ph.name, err)
	}
	fmt.Printf("round %d %-15s %d pods on %d nodes: %d bound in %s: %.1f pods/s (50/90/99 %% bound at %v)\n",
		round, ph.name, pods, nodes, r.bound, r.elapsed.Round(time.Millisecond), r.rate(), roundAll(r.quantiles))
	fmt.Printf("round %d %-15s CPU %.2f ms per bound pod (%.2f cores); scheduling attempts: %s\n", round, ph.name,
		r.cpu.Seconds()*1000/float64(max(r.bound, 1)), r.cpu.Seconds()/r.elapsed.Seconds(), tried)
	switch {
	case r.bound < pods && r.settled:
		fmt.Printf("round %d %-15s UNPLACED: %d of %d pods not bound, none bound for %s (left out of the rate, as the replay drops a pod that fits nowhere)\n",
			round, ph.name, pods-r.bound, pods, ph.settle)
	case r.bound < pods:
		fmt.Printf("round %d %-15s PARTIAL: %d of %d pods bound before the %s timeout\n", round, ph.name, r.bound, pods, timeout)
	}
	if err := deletePhase(ctx, client, ph); err != nil {
		return result{}, fmt.Errorf("%s: cleaning up: %w", ph.name, err)
	}
	return r, writeHeapProfile(round, ph.name)
}

// roundAll rounds durations to 100 ms, for printing.
func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(100 * time.Millisecond)
	}
	return out
}

var cpuProfileDir string

// startProfile profiles one phase when -cpuprofile-dir is set.
func startProfile(round int, name string) (func(), error) {
	if cpuProfileDir == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(cpuProfileDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(cpuProfileDir, fmt.Sprintf("%d-%s.pprof", round, name)))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeHeapProfile writes what is live after a phase's cleanup, when
// -cpuprofile-dir is set: what grows from round to round shows there.
func writeHeapProfile(round int, name string) error {
	if cpuProfileDir == "" {
		return nil
	}
	runtime.GC()
	f, err := os.Create(filepath.Join(cpuProfileDir, fmt.Sprintf("%d-%s.heap", round, name)))
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("heap").WriteTo(f, 0)
}
