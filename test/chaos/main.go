// chaos runs bounded fault runs against a real cluster (apiserver + etcd,
// the qgpu-scheduler binary, hollow kubelets with the real agent on fake
// cards, RBAC and the admission policy of manifests/ on) and ends each run
// with the invariant checker. `make chaos` runs it. Every run prints what it
// did, counts of pods scheduled, rescheduled and rejected, and
// `violations <n>`; the last line is the sum over all runs.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

type options struct {
	pods    int           // pods created in the scheduler-kill run (the others use a fraction)
	runTime time.Duration // bound on one run's churn
	seed    int64
	only    string
	keep    string
}

type chaosRun struct {
	name, what string
	fn         func(ctx context.Context, e *env) error
	// prepare, if set, changes the cluster's options before it starts
	// (fault proxies that must be there before the agents).
	prepare func(e *env, c *harness.ClusterOptions) error
}

var runs = []chaosRun{
	{"scheduler-kill", "SIGKILL the scheduler at random points while qGPU pods of every class are created and deleted, restart it", runSchedulerKill, nil},
	{"leader-election", "two scheduler replicas with 4 s leases; SIGKILL the leader mid-load, the standby takes over", runLeaderElection, nil},
	{"bind-failures", "PreBind's update and the binding rejected by toggled admission policies, label patches racing PreBind (conflicts)", runBindFailures, nil},
	{"agent-kubelet", "agent SIGKILLed between and during Allocate calls and store writes, kubelet device manager restarted, a card turned unhealthy under its pods", runAgentKubelet, nil},
	{"topology", "pods deleted while being scheduled, a node deleted and re-added, a card removed from an inventory under running pods and restored", runTopology, nil},
	{"ledger-orders", "binding responses lost after the write (a proxy), a node's mixed label and a card's health flipping while pods wait, two QGPU profiles in one scheduler", runLedgerOrders, nil},
	{"kubelet-api-faults", "the agents' PodResources calls refused at random and in storms (a proxy), the kubelets' rate limit drained by a side client, Allocate calls cut mid-call (a proxy), twin pods, kubelets paused", runKubeletAPIFaults, prepareKubeletAPIFaults},
	{"apiserver-faults", "binding responses lost after the write while the scheduler's read-back of the pod fails too (a proxy), the apiserver restarted on the same etcd and URL (every informer lists again)", runAPIServerFaults, prepareAPIServerFaults},
}

func main() {
	var o options
	flag.IntVar(&o.pods, "pods", 2000, "qGPU pods created (and deleted) in the scheduler-kill run")
	flag.DurationVar(&o.runTime, "run-time", 60*time.Second, "bound on the churn of the scheduler-kill run (the others get half)")
	flag.Int64Var(&o.seed, "seed", time.Now().UnixNano()%1e6, "random seed (printed, to replay a run)")
	flag.StringVar(&o.only, "run", "", "comma-separated run names (default: all)")
	flag.StringVar(&o.keep, "keep", "", "keep each run's cluster dir (logs) under this directory")
	flag.Parse()
	// The in-process apiserver logs through klog; its chatter would bury
	// the report. Component logs stay in each run's directory (-keep).
	kf := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kf)
	_ = kf.Set("logtostderr", "false")
	_ = kf.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	// The harness links ktesting, whose init catches SIGINT: end cleanly ourselves.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runAll(ctx, o))
}

func runAll(ctx context.Context, o options) int {
	fmt.Printf("chaos: seed %d, %d pods in the scheduler-kill run, churn bounded to %v per run\n", o.seed, o.pods, o.runTime)
	total, start := 0, time.Now()
	for i, r := range runs {
		if o.only != "" && !strings.Contains(","+o.only+",", ","+r.name+",") {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		fmt.Printf("\n== run %s: %s\n", r.name, r.what)
		t0 := time.Now()
		n := runOne(ctx, o, int64(i), r)
		total += n
		fmt.Printf("run %s took %v\nviolations %d\n", r.name, time.Since(t0).Round(time.Second), n)
	}
	fmt.Printf("\nchaos: all runs took %v\n", time.Since(start).Round(time.Second))
	fmt.Printf("violations %d\n", total)
	if total > 0 {
		return 1
	}
	return 0
}

// runOne starts a cluster, runs the faults, checks, and tears down. A run
// that cannot complete counts as one violation: it proved nothing.
func runOne(ctx context.Context, o options, i int64, r chaosRun) int {
	e, err := startEnv(ctx, o, o.seed+i, r)
	if err != nil {
		fmt.Printf("run %s: cluster did not start: %v\n", r.name, err)
		return 1
	}
	defer e.stop()
	if err := r.fn(ctx, e); err != nil {
		fmt.Printf("run %s failed: %v\n", r.name, err)
		return 1 + e.finish(ctx)
	}
	return e.finish(ctx)
}
