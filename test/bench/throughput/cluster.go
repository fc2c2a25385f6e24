package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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

// createNodes makes n qGPU nodes of 8 V100 32 GB cards, every other one
// mixed, each also offering nvidia.com/gpu: 8 for the stock profile.
func createNodes(ctx context.Context, client kubernetes.Interface, n int) error {
	return parallel(n, func(i int) error {
		node := builders.GPUNode(fmt.Sprintf("node-%05d", i), i%2 == 0, builders.Cards(8, "Tesla V100-SXM2-32GB", 32510))
		for _, l := range []v1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
			l["nvidia.com/gpu"] = resource.MustParse("8")
		}
		_, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
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
}

type result struct {
	bound   int
	elapsed time.Duration
}

func (r result) rate() float64 { return float64(r.bound) / r.elapsed.Seconds() }

// measure creates the phase's pods and waits until a watch has seen all of
// them bound (or the timeout), timing from the first create to the last bind.
func measure(ctx context.Context, client kubernetes.Interface, ph phase, n int, timeout time.Duration) (result, error) {
	var bound atomic.Int64
	var last atomic.Int64
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
		last.Store(time.Now().UnixNano())
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
	start := time.Now()
	if err := parallel(n, func(i int) error {
		_, err := client.CoreV1().Pods("default").Create(ctx, ph.pod(i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return result{}, fmt.Errorf("creating pods: %w", err)
	}
	select {
	case <-all:
	case <-time.After(timeout):
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	end := time.Unix(0, last.Load())
	if bound.Load() == 0 {
		end = time.Now()
	}
	return result{bound: int(bound.Load()), elapsed: end.Sub(start)}, nil
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
	p := b.Obj()
	p.UID = ""
	p.Spec.SchedulerName = scheduler
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[phaseLabel] = phaseName
	return b
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
