package main

import (
	"context"
	"fmt"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// runSchedulerKill SIGKILLs the scheduler at three random points of a
// churn of o.pods pods and restarts it at once; the restarted one rebuilds
// its ledger from the assignments and must not place on top of them.
func runSchedulerKill(ctx context.Context, e *env) error {
	n := e.o.pods
	// Three kills, one in each fifth from the second on, at a random pod:
	// the restarted scheduler needs the old lease (4 s) to expire first.
	kills := map[int]bool{}
	for k := 1; k <= 3; k++ {
		kills[k*n/5+e.rng.Intn(n/5)] = true
	}
	var ferr error
	created, err := e.churn(ctx, n, 50, e.o.runTime, func(i int) {
		if !kills[i] || ferr != nil {
			return
		}
		e.endScheduler(e.c.Scheduler, true)
		e.logf("scheduler SIGKILLed after pod %d; restarting", i)
		s, err := e.startScheduler(ctx, "scheduler.log")
		e.setScheduler(s)
		ferr = err
	})
	if err != nil {
		return err
	}
	e.logf("created %d pods (%d deleted during the churn), 3 scheduler kills", created, e.deleted)
	return ferr
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
