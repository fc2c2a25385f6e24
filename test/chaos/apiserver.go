package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// prepareAPIServerFaults starts the apiserver behind the harness's front
// door, so that it can be restarted on the same URL.
func prepareAPIServerFaults(_ *env, c *harness.ClusterOptions) error {
	c.RestartableAPIServer = true
	return nil
}

// runAPIServerFaults runs the scheduler behind the lossy proxy, which
// loses every third binding response after the apiserver wrote it and
// then fails the scheduler's reads of that pod for 1-3 s, so that a Bind
// that reads the pod back to learn its outcome cannot, and now and then
// holds back the scheduler's pod watch for 1-2 s, so that its informer
// does not tell it soon either (lossyProxy); and restarts the
// apiserver once, at 30% of the churn's pods or time (every client's connection cut,
// down for 1-2 s, up again on the same etcd, so every informer lists and
// watches again). One restart: client-go's reflectors back off
// exponentially from 0.8 s and reset only after two minutes without a
// failure, so a second outage seconds later leaves the scheduler's
// informers silent for tens of seconds, longer than the churn. The
// scheduler keeps kube-scheduler's default leases (15 s, renewed within
// 10 s), as a deployment does, so that a restart costs it no leadership;
// the run fails unless a pod created after the restart was bound (by the
// churn's end or within afterRestartWait of it).
func runAPIServerFaults(ctx context.Context, e *env) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(e.c.Dir, "scheduler.kubeconfig"))
	if err != nil {
		return err
	}
	proxy, err := startLossyProxy(cfg, 3, e.o.seed)
	if err != nil {
		return err
	}
	proxy.readBackLoss.Store(true)
	e.cleanups = append(e.cleanups, proxy.close)
	if err := e.useDefaultLeases(); err != nil {
		return err
	}
	if err := e.restartScheduler(ctx, proxy.url); err != nil {
		return err
	}
	n, budget := e.o.pods/4, e.o.runTime/2
	restartAt, restarted := 3*n/10, -1
	var ferr error
	start := time.Now()
	_, err = e.churn(ctx, n, 60, budget, func(i int) {
		// At 30% of the pods or of the time, whichever comes first: on
		// a loaded machine the pods come slower than paced, and a
		// restart at 30% of them could leave no time after it.
		if restarted < 0 && (i >= restartAt || time.Since(start) >= budget*3/10) {
			ferr = e.restartAPIServer(ctx, i)
			restarted = e.createdCount()
		}
	})
	proxy.losing.Store(false)
	e.logf("%d binding responses lost after the write; %d reads of %d such pods failed after; the scheduler's pod watches held back %d times",
		proxy.lost.Load(), proxy.readsLost.Load(), proxy.readBackPods(), proxy.stalls.Load())
	if err = errors.Join(err, ferr); err != nil {
		return err
	}
	var errs []error
	if proxy.lost.Load() == 0 || proxy.readsLost.Load() == 0 {
		errs = append(errs, errors.New("no binding response lost or no read-back failed"))
	}
	switch {
	case restarted < 0:
		errs = append(errs, errors.New("the apiserver was not restarted"))
	case e.createdCount() <= restarted:
		errs = append(errs, fmt.Errorf("no pod was created after the apiserver restart (p-%05d on)", restarted))
	default:
		if last := e.waitBoundFrom(ctx, restarted, afterRestartWait); last < restarted {
			errs = append(errs, fmt.Errorf("no pod created after the apiserver restart (p-%05d on) was bound within %v of the churn's end: the last bound is p-%05d",
				restarted, afterRestartWait, last))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("the run tested less than it should: %w", errors.Join(errs...))
	}
	return nil
}

// afterRestartWait bounds the wait, after the churn, for a pod created
// after the apiserver's restart to be bound: the churn may end soon after
// the restart, and the scheduler's informers relist first.
const afterRestartWait = 30 * time.Second

// waitBoundFrom waits up to limit for a pod p-<index ≥ from> to be seen
// bound and returns the highest index seen bound.
func (e *env) waitBoundFrom(ctx context.Context, from int, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for e.lastBoundIndex() < from && time.Now().Before(deadline) && sleepCtx(ctx, 250*time.Millisecond) {
	}
	return e.lastBoundIndex()
}

// restartAPIServer restarts the apiserver, down for 1-2 s, and tells the
// watchdog and the observer: the kubelets cannot renew their Leases
// meanwhile, and the observer's informers relist after (their watch
// errors open the observer's relist windows too).
func (e *env) restartAPIServer(ctx context.Context, after int) error {
	down := jitter(e.rng, time.Second, time.Second)
	e.watch.expectOutage(2 * time.Minute)
	start := time.Now()
	e.logf("apiserver stopped after pod %d, down for %v", after, down.Round(10*time.Millisecond))
	err := e.c.RestartAPIServer(ctx, down)
	// From now on the kubelets must renew within the usual bound.
	e.watch.expectOutage(silenceBound)
	e.obs.distrust(relistWindow)
	if err != nil {
		return err
	}
	e.logf("apiserver ready again %v after it stopped", time.Since(start).Round(10*time.Millisecond))
	return nil
}

// useDefaultLeases removes the run's short leader leases from the
// cluster's scheduler config (restartScheduler starts from it).
func (e *env) useDefaultLeases() error {
	path := filepath.Join(e.c.Dir, "scheduler-config.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := strings.Replace(string(b), shortLeases, "", 1)
	if s == string(b) {
		return errors.New("scheduler-config.yaml: no short leases to remove")
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
