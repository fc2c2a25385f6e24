package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

const (
	qgpuScheduler  = "qgpu-scheduler"
	stockScheduler = "stock-scheduler"
	phaseLabel     = "bench.qgpu.io/phase"
	// workers create pods in parallel, as scheduler_perf's createPods does.
	workers = 16
	// clientQPS is high enough not to throttle anything measured.
	clientQPS = 5000
)

func fastClient(cp *harness.ControlPlane) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = clientQPS, clientQPS
	return kubernetes.NewForConfig(cfg)
}

// createNodes makes the workload's n qGPU nodes of 8 cards, each also
// offering nvidia.com/gpu: 8 for the stock profile.
func createNodes(ctx context.Context, client kubernetes.Interface, w workload, n int) error {
	return parallel(n, func(i int) error {
		node, err := w.node(i, n)
		if err != nil {
			return err
		}
		_, err = client.CoreV1().Nodes().Create(ctx, withWholeGPUs(node, 8), metav1.CreateOptions{})
		return err
	})
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(n int, f func(int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

type phase struct {
	name, scheduler string
	pod             func(i int) *v1.Pod
	// settle > 0 ends the phase once no pod was bound for that long: the
	// trace's pods include some that fit nowhere once the cluster filled
	// (the replay drops them); 0 waits for every pod.
	settle time.Duration
}

type result struct {
	bound   int
	elapsed time.Duration
	// settled: the phase ended with pods unbound after its settle time
	// without a bind.
	settled bool
	// quantiles are when 50, 90 and 99 % of the bound pods were bound.
	quantiles []time.Duration
	// cpu is the CPU time this process (apiserver, etcd and scheduler
	// together) used from the first create to the last bind.
	cpu time.Duration
}

// processCPU is the CPU time (user and system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (r result) rate() float64 { return float64(r.bound) / r.elapsed.Seconds() }

// measure creates the phase's pods and waits until a watch has seen all of
// them bound (or the timeout, or the phase's settle time without a bind),
// timing from the first create to the last bind.
func measure(ctx context.Context, client kubernetes.Interface, ph phase, n int, timeout time.Duration) (result, error) {
	var bound atomic.Int64
	var last, lastCPU atomic.Int64
	var mu sync.Mutex
	var times []int64 // each bind's time, as seen by the watch
	all := make(chan struct{})
	seen := sync.Map{}
	inf := cache.NewSharedIndexInformer(
		cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "pods", "default", func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{phaseLabel: ph.name}).String()
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}), &v1.Pod{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if _, dup := seen.LoadOrStore(obj.(*v1.Pod).UID, true); dup {
			return
		}
		now := time.Now().UnixNano()
		last.Store(now)
		lastCPU.Store(int64(processCPU()))
		mu.Lock()
		times = append(times, now)
		mu.Unlock()
		if bound.Add(1) == int64(n) {
			close(all)
		}
	}}); err != nil {
		return result{}, err
	}
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	go inf.Run(watchCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return result{}, ctx.Err()
	}
	start, startCPU := time.Now(), processCPU()
	if err := parallel(n, func(i int) error {
		_, err := client.CoreV1().Pods("default").Create(ctx, ph.pod(i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return result{}, fmt.Errorf("creating pods: %w", err)
	}
	settled, err := wait(ctx, all, &last, ph.settle, timeout)
	if err != nil {
		return result{}, err
	}
	end := time.Unix(0, last.Load())
	if bound.Load() == 0 {
		end = time.Now()
	}
	mu.Lock()
	defer mu.Unlock()
	r := result{bound: int(bound.Load()), elapsed: end.Sub(start), settled: settled}
	if c := lastCPU.Load(); c != 0 {
		r.cpu = time.Duration(c) - startCPU
	}
	for _, q := range []int{50, 90, 99} {
		if k := len(times) * q / 100; k > 0 {
			r.quantiles = append(r.quantiles, time.Unix(0, times[k-1]).Sub(start))
		}
	}
	return r, nil
}

// wait returns once all is closed, after timeout, or (settle > 0) once no
// pod was bound for settle since the last one (then settled is true).
func wait(ctx context.Context, all <-chan struct{}, last *atomic.Int64, settle, timeout time.Duration) (settled bool, err error) {
	deadline := time.After(timeout)
	var tick <-chan time.Time
	if settle > 0 {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-all:
			return false, nil
		case <-deadline:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		case <-tick:
			if l := last.Load(); l != 0 && time.Since(time.Unix(0, l)) >= settle {
				return true, nil
			}
		}
	}
}

// deleteAttempts bounds the DeleteCollection calls of a cleanup: on a
// loaded machine one call over 20000 pods can outlast the apiserver's
// request timeout (seen 2026-11-25, SIZE=large: "stream error ...
// INTERNAL_ERROR" after the first round) having deleted only some of them;
// the next call deletes the rest.
const deleteAttempts = 5

// deletePhase deletes the phase's pods at once and waits until they are
// gone, so that the next phase starts from the same empty cluster.
func deletePhase(ctx context.Context, client kubernetes.Interface, ph phase) error {
	pods := client.CoreV1().Pods("default")
	sel := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{phaseLabel: ph.name}).String()}
	var err error
	for range deleteAttempts {
		if err = pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, sel); err == nil {
			break
		}
	}
	if err != nil {
		return err
	}
	for {
		list, err := pods.List(ctx, sel)
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			// Let the scheduler's informers catch up with the deletes.
			time.Sleep(2 * time.Second)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func benchPod(name, phaseName, scheduler string) *builders.PodBuilder {
	b := builders.GPUPod(name)
	asBenchPod(b.Obj(), phaseName, scheduler)
	return b
}

// asBenchPod makes p a pod of the phase, for scheduler, its UID left to the
// apiserver.
func asBenchPod(p *v1.Pod, phaseName, scheduler string) *v1.Pod {
	p.UID = ""
	p.Spec.SchedulerName = scheduler
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[phaseLabel] = phaseName
	return p
}

// qgpuPod is a realistic mix: 60% general (a quarter to a half card, one in
// twenty whole), 20% online and 20% offline (mixed nodes only).
func qgpuPod(i int) *v1.Pod {
	b := benchPod(fmt.Sprintf("qgpu-%05d", i), qgpuScheduler, qgpuScheduler)
	sizes := []struct{ mem, cores int64 }{{4, 10}, {8, 25}, {8, 30}, {16, 50}, {4, 20}, {12, 40}}
	s := sizes[i%len(sizes)]
	switch k := i % 20; {
	case k < 11:
		b.General("c", s.mem, s.cores)
	case k == 11:
		b.General("c", 24, 100)
	case k < 16:
		b.Online("c", s.mem)
	default:
		b.Offline("c", s.mem, s.cores)
	}
	return b.Obj()
}

// stockPod asks for one whole nvidia.com/gpu.
func stockPod(i int) *v1.Pod {
	p := benchPod(fmt.Sprintf("stock-%05d", i), "stock", stockScheduler).Obj()
	p.Spec.Containers = []v1.Container{{Name: "c", Image: "busybox", Resources: v1.ResourceRequirements{
		Limits: v1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
	}}}
	return p
}
