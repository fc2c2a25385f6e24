package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// randomPod is a qGPU pod of a random class and shape: general shares,
// whole cards, two containers, online and offline (mixed node only); in
// the runs with DRA pods one in claimEvery asks through the claim returned
// with it (claims.go), else the claim is nil. With e.twins every odd pod
// is a twin of the one before: the same request.
func (e *env) randomPod(i int) (*corev1.Pod, *resourceapi.ResourceClaim) {
	if e.twins && i%2 == 1 && e.prev != nil {
		p := e.prev.DeepCopy()
		p.Name = fmt.Sprintf("p-%05d", i)
		if len(e.schedulers) > 0 {
			p.Spec.SchedulerName = e.schedulers[i%len(e.schedulers)]
		}
		return p, nil
	}
	if e.dra && e.rng.Intn(claimEvery) == 0 {
		p, claim := e.claimedPod(i)
		e.prev = nil // a claimed pod has no twin
		return p, claim
	}
	p := e.newPod(i)
	e.prev = p
	return p, nil
}

func (e *env) newPod(i int) *corev1.Pod {
	b := builders.GPUPod(fmt.Sprintf("p-%05d", i)).Namespace(ns)
	r := e.rng
	switch k := r.Intn(10); {
	case k < 4:
		b.General("c", 1+r.Int63n(3), 5+r.Int63n(30))
	case k == 4:
		b.General("c", 8, 100)
	case k == 5:
		b.General("a", 1+r.Int63n(2), 10).General("b", 1, 5+r.Int63n(20))
	case k < 8:
		b.Online("c", 1+r.Int63n(4))
	default:
		b.Offline("c", 1+r.Int63n(4), 10+r.Int63n(50))
	}
	p := b.Obj()
	p.UID = ""
	if len(e.schedulers) > 0 {
		p.Spec.SchedulerName = e.schedulers[i%len(e.schedulers)]
	}
	return p
}

// churn creates up to n random pods, one after another, deleting the
// oldest whenever more than maxLive exist, for at most budget; fault(i)
// runs after pod i was created. It returns how many pods it created.
func (e *env) churn(ctx context.Context, n, maxLive int, budget time.Duration, fault func(i int)) (int, error) {
	start := time.Now()
	deadline := start.Add(budget)
	// Paced to end at 80% of the bound: a pod created and deleted before
	// any scheduler saw it tests nothing.
	pace := budget * 8 / 10 / time.Duration(max(n, 1))
	var live []string
	i := 0
	for ; i < n && time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * pace)))
		p, claim := e.randomPod(e.createdCount())
		if err := e.create(ctx, p, claim); err != nil {
			return i, err
		}
		live = append(live, p.Name)
		for len(live) > maxLive {
			if err := e.delete(ctx, live[0]); err != nil {
				return i, err
			}
			live = live[1:]
		}
		if fault != nil {
			fault(i)
		}
	}
	if i < n {
		e.logf("churn stopped at its time bound after %d of %d pods", i, n)
	}
	return i, nil
}

// create creates the pod, after its claim if it has one.
func (e *env) create(ctx context.Context, p *corev1.Pod, claim *resourceapi.ResourceClaim) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if claim != nil {
		if _, err := e.cs.ResourceV1().ResourceClaims(ns).Create(cctx, claim, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating claim %s: %w", claim.Name, err)
		}
	}
	created, err := e.cs.CoreV1().Pods(ns).Create(cctx, p, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating pod %s: %w", p.Name, err)
	}
	e.mu.Lock()
	e.created++
	if claim != nil {
		e.claimed[created.UID] = true
		e.claimNames[p.Name] = true
	}
	e.mu.Unlock()
	return nil
}

// delete removes a pod at once (grace 0), as a force delete does, and
// then its claim (dropClaim).
func (e *env) delete(ctx context.Context, name string) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	zero := int64(0)
	err := e.cs.CoreV1().Pods(ns).Delete(cctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting pod %s: %w", name, err)
	}
	e.mu.Lock()
	if err == nil {
		e.deleted++
	}
	claimed := e.claimNames[name]
	e.mu.Unlock()
	if claimed {
		return e.dropClaim(cctx, name)
	}
	return nil
}
