package main

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
	"github.com/qgpu-scheduler/qgpu/test/tracepods"
)

// traceSeed orders the trace's pods for --pods-from.
const traceSeed = 42

// workload is what a run creates: the nodes, and the qgpu-scheduler
// phase's pods.
type workload struct {
	node func(i, n int) (*v1.Node, error)
	pod  func(i int) *v1.Pod
	// stockPod is the stock phase's pod i: what pod(i) asks for, without qGPU.
	stockPod func(i int) *v1.Pod
	// describe says what the nodes and pods are, for the first line.
	describe string
	// settle is both phases' (phase.settle).
	settle time.Duration
}

// traceSettle ends a phase of trace pods once none was bound for this long:
// kube-scheduler retries an unschedulable pod at least every 10 s
// (podMaxBackoffSeconds) and at once when a pod leaves, so a pod still
// pending then fits nowhere.
const traceSettle = 15 * time.Second

// syntheticWorkload is nodes of 8 V100 32 GB cards, every other one mixed,
// and qgpuPod's mix of fractional pods.
func syntheticWorkload() workload {
	return workload{
		node: func(i, _ int) (*v1.Node, error) {
			return builders.GPUNode(fmt.Sprintf("node-%05d", i), i%2 == 0, builders.Cards(8, "Tesla V100-SXM2-32GB", 32510)), nil
		},
		pod:      qgpuPod,
		stockPod: stockPod,
		describe: "nodes of 8 cards (every other one mixed), synthetic qGPU pods",
	}
}

// traceWorkload reads the openb pod list at path (and the node list beside
// it): node i of n has 8 cards of the model of the node list's node at
// i/n of it (the list's mix of models), with that node's CPU and memory
// per card; the pods are the list's, in a seeded order (repeated when more
// are asked for), with their card share, model filter (the use-gpu-type
// annotation), CPU and memory, and the pods without cards among them. Pods
// of a model no node has (the trace holds some) are left out.
func traceWorkload(path string) (workload, error) {
	trace, err := tracepods.Read(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return workload{}, err
	}
	var order []int
	for _, k := range rand.New(rand.NewSource(traceSeed)).Perm(len(trace.Pods)) {
		if trace.Accepted(&trace.Pods[k]) {
			order = append(order, k)
		}
	}
	if len(order) == 0 {
		return workload{}, fmt.Errorf("%s: no pod any node of %s accepts", path, tracepods.NodeList)
	}
	return workload{
		node: func(i, n int) (*v1.Node, error) {
			tn := &trace.Nodes[i*len(trace.Nodes)/n]
			node, err := tracepods.NodeObject(fmt.Sprintf("node-%05d", i), tn, 8)
			if err == nil {
				node.Labels[modelLabel] = tn.Model
			}
			return node, err
		},
		pod: func(i int) *v1.Pod {
			p := trace.PodObject(fmt.Sprintf("qgpu-%05d", i), &trace.Pods[order[i%len(order)]])
			return asBenchPod(p, qgpuScheduler, qgpuScheduler)
		},
		stockPod: func(i int) *v1.Pod {
			return stockTracePod(fmt.Sprintf("stock-%05d", i), &trace.Pods[order[i%len(order)]])
		},
		settle:   traceSettle,
		describe: fmt.Sprintf("nodes of 8 cards of the trace's models, pods of %s (%d of its %d pods: those some node accepts)", path, len(order), len(trace.Pods)),
	}, nil
}

// modelLabel carries a trace node's card model, as GPU feature discovery's
// label does on a real node; the stock phase's model filters select on it.
const modelLabel = "nvidia.com/gpu.product"

// stockTracePod is trace pod p as a cluster without qGPU would run it, for
// the stock phase: its CPU and memory, a whole nvidia.com/gpu for each card
// it has a share of, and its model filter as a required node affinity on the
// model label. The trace's model names are exact (gpu_spec lists them), so
// the affinity accepts the nodes the use-gpu-type annotation does.
func stockTracePod(name string, p *sim.Pod) *v1.Pod {
	pod := benchPod(name, "stock", stockScheduler).Obj()
	pod.Spec.Containers = []v1.Container{{Name: "c", Image: "busybox"}}
	c := &pod.Spec.Containers[0]
	c.Resources = v1.ResourceRequirements{Requests: v1.ResourceList{
		v1.ResourceCPU:    *resource.NewMilliQuantity(p.CPUMilli, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(p.MemoryMiB<<20, resource.BinarySI),
	}}
	if p.NumGPU > 0 {
		gpus := *resource.NewQuantity(int64(p.NumGPU), resource.DecimalSI)
		c.Resources.Requests["nvidia.com/gpu"] = gpus
		c.Resources.Limits = v1.ResourceList{"nvidia.com/gpu": gpus}
	}
	if len(p.Models) > 0 {
		pod.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: modelLabel, Operator: v1.NodeSelectorOpIn, Values: p.Models}},
			}}},
		}}
	}
	return pod
}

// withWholeGPUs adds what the stock profile's pods ask for: a whole
// nvidia.com/gpu per card.
func withWholeGPUs(node *v1.Node, cards int) *v1.Node {
	for _, l := range []v1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		l["nvidia.com/gpu"] = *resource.NewQuantity(int64(cards), resource.DecimalSI)
	}
	return node
}
