// Command qgpu-priority-sim runs the online/offline priority controller
// against a simulated card in simulated time: the online process's busy
// and idle phases, offline kernels queued on the card, NVML's sample
// period and HAMi-core's shared regions, through a fake cgroup tree. For
// each suspension mechanism it prints
//
//	<mechanism> thaws-while-busy N suspend-p99 X resume-p99 Y ...
//
// No GPU is involved: see docs/priority.md for what this does and does not show.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/priority"
	"github.com/qgpu-scheduler/qgpu/test/prioritysim"
)

func main() {
	scenario := flag.String("scenario", "busy-online", "busy-online (8 s busy, 2 s idle) or bursty-online (50 ms busy every 500 ms)")
	duration := flag.Duration("duration", time.Minute, "simulated time")
	period := flag.Duration("nvml-period", time.Second/6, "NVML's per-process sample period (1/6 s to 1 s on real cards)")
	kernel := flag.Duration("kernel", 20*time.Millisecond, "length of an offline kernel")
	queue := flag.Int("queue", 4, "offline kernels each offline process keeps queued on the card")
	activity := flag.String("activity", "samples", "NVML activity model: samples, or per-poll (the model before issue 17, which flaps)")
	seed := flag.Uint64("seed", 1, "seed of the phases' and kernels' ±20% jitter")
	v1 := flag.Bool("cgroup-v1", false, "simulate a cgroup v1 node (default v2)")
	flag.Parse()
	klog.SetOutput(os.Stderr)
	klog.LogToStderr(false) // keep the report readable
	if err := run(*scenario, *duration, *period, *kernel, *queue, *activity, *seed, *v1); err != nil {
		fmt.Fprintln(os.Stderr, "qgpu-priority-sim:", err)
		os.Exit(2)
	}
}

func run(scenario string, duration, period, kernel time.Duration, queue int, activity string, seed uint64, v1 bool) error {
	cs, err := prioritysim.CardSimDefaults(scenario)
	if err != nil {
		return err
	}
	switch activity {
	case "samples":
	case "per-poll":
		cs.Activity = priority.ActivityPerPoll
	default:
		return fmt.Errorf("--activity %q: must be samples or per-poll", activity)
	}
	if duration <= 0 || period <= 0 || kernel <= 0 || queue < 1 {
		return fmt.Errorf("--duration %s, --nvml-period %s, --kernel %s must be positive and --queue %d at least 1", duration, period, kernel, queue)
	}
	cs.Duration, cs.NVMLPeriod, cs.Kernel, cs.Queue, cs.Seed, cs.CgroupV1 = duration, period, kernel, queue, seed, v1
	fmt.Printf("scenario=%s duration=%s nvml-period=%s offline kernel=%s queue=%d poll=%s idle=%s activity=%s seed=%d\n",
		scenario, duration, period, kernel, queue, cs.Poll, cs.IdleWindow, cs.Activity, seed)
	for _, mech := range []string{priority.MechFreezer, priority.MechInterception} {
		cs.Mechanism = mech
		r, err := prioritysim.RunCardSim(context.Background(), cs)
		if err != nil {
			return fmt.Errorf("%s: %w", mech, err)
		}
		fmt.Printf("%s thaws-while-busy %d suspend-p99 %s resume-p99 %s (busy phases %d, not suspended in time %d, capped %d; suspend p50 %s, resume p50 %s; offline share of the card %.1f%%)\n",
			mech, r.ThawsWhileBusy, p(r.Suspend, 0.99), p(r.Resume, 0.99),
			r.Episodes, r.Missed, r.Capped, p(r.Suspend, 0.5), p(r.Resume, 0.5), 100*r.OfflineShare)
	}
	return nil
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// p returns the q-quantile of ds, or "none" when nothing was measured.
func p(ds []time.Duration, q float64) string {
	if len(ds) == 0 {
		return "none"
	}
	return ms(prioritysim.Percentile(ds, q))
}
