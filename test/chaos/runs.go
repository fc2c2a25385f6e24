package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// runSchedulerKill SIGKILLs the scheduler at three random points of a
// churn of o.pods pods and restarts it at once; the restarted one rebuilds
// its ledger from the assignments and must not place on top of them. With
// DRA pods, a fourth kill comes the moment a claim is seen allocated in
// the second half of the churn: PreBind wrote it, and Bind may not have
// run, which leaves the claim allocated for an unbound pod.
func runSchedulerKill(ctx context.Context, e *env) error {
	n := e.o.pods
	// Three kills, one in each fifth of the churn from the second on, at a
	// random moment: the restarted scheduler needs the old lease (4 s) to
	// expire first. Moments, not pod numbers: on a loaded machine the churn
	// can end at its time bound before the later pod numbers come.
	span := e.o.runTime * 8 / 10 // the churn's pace (churn)
	var kills []time.Duration
	for k := 1; k <= 3; k++ {
		kills = append(kills, time.Duration(k)*span/5+time.Duration(e.rng.Int63n(int64(span/5))))
	}
	var (
		mu     sync.Mutex
		ferr   error
		killed []string
	)
	kill := func(why string) {
		mu.Lock()
		defer mu.Unlock()
		if ferr != nil {
			return
		}
		e.endScheduler(e.c.Scheduler, true)
		e.logf("scheduler SIGKILLed %s; restarting", why)
		killed = append(killed, why)
		s, err := e.startScheduler(ctx, "scheduler.log")
		e.setScheduler(s)
		ferr = err
	}
	start := time.Now()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	if e.dra {
		go e.killOnAllocation(wctx, start.Add(span/2), kill)
	}
	created, err := e.churn(ctx, n, 50, e.o.runTime, func(i int) {
		if len(kills) == 0 || time.Since(start) < kills[0] {
			return
		}
		kills = kills[1:]
		kill(fmt.Sprintf("after pod %d", i))
	})
	stop()
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	e.logf("created %d pods (%d deleted during the churn), %d scheduler kills", created, e.deleted, len(killed))
	return ferr
}

// killOnAllocation calls kill once, the first time after from that it
// sees a claim of the run allocated by qGPU.
func (e *env) killOnAllocation(ctx context.Context, from time.Time, kill func(why string)) {
	if !sleepCtx(ctx, time.Until(from)) {
		return
	}
	w, err := e.cs.ResourceV1().ResourceClaims(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		e.logf("watching claims: %v", err)
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if c, ok := ev.Object.(*resourceapi.ResourceClaim); ok && ev.Type == watch.Modified && qgpuAllocated(c) {
			kill("the moment claim " + c.Name + " was seen allocated")
			return
		}
	}
}

// runLeaderElection starts a standby replica, kills the leader halfway
// through a churn and checks that the standby took the lease.
func runLeaderElection(ctx context.Context, e *env) error {
	before, err := e.leaseHolder(ctx)
	if err != nil {
		return err
	}
	if _, err := e.startReplica(ctx, "scheduler-standby.log"); err != nil {
		return err
	}
	e.logf("leader %s, standby started", before)
	n := e.o.pods / 4
	var ferr error
	_, err = e.churn(ctx, n, 60, e.o.runTime/2, func(i int) {
		if i != n/2 {
			return
		}
		e.endScheduler(e.c.Scheduler, true)
		start := time.Now()
		e.logf("leader SIGKILLed after pod %d", i)
		for ; time.Since(start) < 20*time.Second; time.Sleep(100 * time.Millisecond) {
			if h, err := e.leaseHolder(ctx); err == nil && h != before {
				e.logf("standby %s took the lease after %v", h, time.Since(start).Round(10*time.Millisecond))
				return
			}
		}
		ferr = fmt.Errorf("no replica took the lease within 20 s of the leader's death")
	})
	if err != nil {
		return err
	}
	return ferr
}

func (e *env) leaseHolder(ctx context.Context) (string, error) {
	var l *coordv1.Lease
	var err error
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(200 * time.Millisecond) {
		l, err = e.cs.CoordinationV1().Leases("qgpu-system").Get(ctx, "qgpu-scheduler", metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			return *l.Spec.HolderIdentity, nil
		}
	}
	return "", fmt.Errorf("no scheduler holds the lease: %v", err)
}
