// Package perf runs Kubernetes' own scheduler benchmark, scheduler_perf
// (k8s.io/kubernetes/test/integration/scheduler_perf), on the openb trace's
// nodes and pod shapes, in three cases that each get a fresh etcd,
// kube-apiserver and scheduler: the QGPU profile (config/qgpu-scheduler.yaml),
// the same profile with a no-op plugin in QGPU's place (the limit QGPU can
// reach: the framework's cost of an out-of-tree plugin at the same extension
// points), and stock kube-scheduler defaults with whole-card pods (what users
// compare against). make bench-perf runs it; docs/performance.md#scheduler_perf
// says what each number means.
//
// This file builds the workload (version-independent): nodes sampled from
// the trace's node list, an init fill to a fixed share of the cards, and the
// measured pods after it, as scheduler_perf's node and pod templates. The
// Kubernetes-version-dependent part (scheduler_perf's entry point, the
// framework registry, the no-op plugin) is perf_k8s_test.go.
package perf

import (
	"fmt"
	"math/rand"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
	"github.com/qgpu-scheduler/qgpu/test/tracepods"
)

// The three cases, as scheduler_perf's test case names.
const (
	CaseQGPU  = "qgpu"
	CaseNoop  = "noop"
	CaseStock = "stock"
)

// Cases is the order of a run's cases; later runs rotate it (Order).
var Cases = []string{CaseQGPU, CaseNoop, CaseStock}

// Order is run r's order of the cases: Cases rotated by r, so that no case
// always runs first (on a cold cache) or last (after the others' garbage).
func Order(r int) []string {
	out := make([]string, len(Cases))
	for i := range Cases {
		out[i] = Cases[(i+r)%len(Cases)]
	}
	return out
}

// Sizing is the workload's fill, in cards as the stock case takes them (a
// whole card for any share): the init pods take Fill of the cluster's
// cards, the measured pods Measure more. The qGPU cases hold the same pods
// in their shares, fewer cards.
type Sizing struct {
	Fill, Measure float64
	// ModelFilters keeps the pods' model filters (gpu_spec). Off by
	// default: with them (openb_pod_list_gpuspec10.csv, one pod in ten),
	// fragfit fills the T4 nodes (the smallest cards, 12 % of them) with
	// unfiltered shares first, and T4-only pods found no room at 52 % of the
	// shares (500 nodes, 2026-11-28); scheduler_perf waits for every
	// measured pod.
	ModelFilters bool
}

// DefaultSizing leaves a third of the cards free in the stock case (and
// more in the qGPU cases, whose pods share cards), so that no pod is
// unschedulable in any case: scheduler_perf waits for every measured pod,
// and pods of one model (a tenth of the trace's name their models) need
// room on that model's nodes.
var DefaultSizing = Sizing{Fill: 0.35, Measure: 0.30}

// traceSeed orders the trace's pods, as make bench-throughput does.
const traceSeed = 42

// modelLabel is GPU feature discovery's model label; the stock case's nodes
// carry it and its pods' model filters select on it.
const modelLabel = "nvidia.com/gpu.product"

// stockGPU is the device plugin's whole-card resource.
const stockGPU v1.ResourceName = "nvidia.com/gpu"

// Workload is one size's nodes and pods.
type Workload struct {
	trace *tracepods.Trace
	// Nodes are the sampled trace nodes: node i of n is the node list's
	// node at i/n of it, with its model, cards, CPU and memory.
	Nodes []sim.Node
	// Fill and Measured are the init and measured pods, in arrival order.
	Fill, Measured []sim.Pod
	// Skipped counts the trace's pods left out of the order: those asking
	// for more than one card, those of a model no sampled node has, and
	// those whose qGPU request fits no empty card of their models (the
	// replay's converter sizes a whole card's memory by the smallest card,
	// T4's 15109 MiB, as 15 GiB; a T4 card holds 14).
	SkippedMultiCard, SkippedModel, SkippedFit int
	// Cards is the sampled nodes' cards; the *Milli fields sum the pods'
	// card shares (1000 a card) and the *Whole fields the whole cards the
	// stock case's pods take; CPUMilli is the nodes' CPU and PodCPUMilli
	// the pods'.
	Cards                    int
	FillMilli, MeasuredMilli int64
	FillWhole, MeasuredWhole int64
	CPUMilli, PodCPUMilli    int64
}

// NewWorkload samples nodes nodes from trace and orders its pods with a
// fixed seed, then takes init pods until the whole cards they take in the
// stock case reach s.Fill of the cards, and measured pods until
// s.Fill+s.Measure (the order repeats where the trace runs out).
func NewWorkload(trace *tracepods.Trace, nodes int, s Sizing) (*Workload, error) {
	if nodes <= 0 || len(trace.Nodes) == 0 {
		return nil, fmt.Errorf("want nodes > 0 and a node list, got %d nodes of %d", nodes, len(trace.Nodes))
	}
	w := &Workload{trace: trace}
	models := map[string]int64{}
	for i := range nodes {
		n := trace.Nodes[i*len(trace.Nodes)/nodes]
		w.Nodes = append(w.Nodes, n)
		w.Cards += n.GPUs
		w.CPUMilli += n.CPUMilli
		if n.GPUs > 0 {
			mib, ok := sim.CardMemoryMiB[n.Model]
			if !ok {
				return nil, fmt.Errorf("node %s: model %q has no memory in sim.CardMemoryMiB", n.Name, n.Model)
			}
			models[n.Model] = mib / protocol.GiB
		}
	}
	var order []int
	for _, k := range rand.New(rand.NewSource(traceSeed)).Perm(len(trace.Pods)) {
		p := &trace.Pods[k]
		switch {
		case p.NumGPU > 1:
			w.SkippedMultiCard++
		case !w.accepted(p, models, false):
			w.SkippedModel++
		case !w.accepted(p, models, true):
			w.SkippedFit++
		default:
			order = append(order, k)
		}
	}
	pods := trace.Pods
	if !s.ModelFilters {
		pods = append([]sim.Pod(nil), pods...)
		for i := range pods {
			pods[i].Models = nil
		}
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("%s: no pod of one card or none that a sampled node accepts", trace.Source)
	}
	next := 0
	take := func(until float64, milli, whole *int64) []sim.Pod {
		var out []sim.Pod
		for float64(w.FillWhole+w.MeasuredWhole) < until*float64(w.Cards) {
			p := pods[order[next%len(order)]]
			next++
			out = append(out, p)
			*milli += p.GPUDemand()
			*whole += int64(p.NumGPU)
			w.PodCPUMilli += p.CPUMilli
		}
		return out
	}
	w.Fill = take(s.Fill, &w.FillMilli, &w.FillWhole)
	w.Measured = take(s.Fill+s.Measure, &w.MeasuredMilli, &w.MeasuredWhole)
	if len(w.Measured) == 0 {
		return nil, fmt.Errorf("sizing %+v leaves no measured pod on %d cards", s, w.Cards)
	}
	return w, nil
}

// accepted reports whether p's model filter names a model some sampled node
// has (models: the sampled models' card memory in GiB) and, with fit, its
// qGPU request fits an empty card of that model (pods without cards:
// always).
func (w *Workload) accepted(p *sim.Pod, models map[string]int64, fit bool) bool {
	req := w.trace.Request(p)
	if len(req.Containers) == 0 {
		return true
	}
	c := req.Containers[0]
	perCard := c.MemoryGiB
	if c.Whole && c.Cards > 0 {
		perCard = c.MemoryGiB / int64(c.Cards)
	}
	for m, gib := range models {
		if req.MatchesModel(m) && (!fit || perCard <= gib) {
			return true
		}
	}
	return false
}

// Describe is the workload in one line, for the benchmark's output.
func (w *Workload) Describe() string {
	return fmt.Sprintf("%d nodes (%d cards), %d init pods (%.0f%% of the cards whole, %.0f%% in qGPU shares), %d measured pods (%.0f%% more whole, %.0f%% in shares), pod CPU %.0f%% of the nodes'; left out of %s: %d pods of 2+ cards, %d of a model no node has, %d whose qGPU request fits no card of their models",
		len(w.Nodes), w.Cards, len(w.Fill), pct(w.FillWhole*1000, w.Cards), pct(w.FillMilli, w.Cards),
		len(w.Measured), pct(w.MeasuredWhole*1000, w.Cards), pct(w.MeasuredMilli, w.Cards),
		100*float64(w.PodCPUMilli)/float64(w.CPUMilli), w.trace.Source, w.SkippedMultiCard, w.SkippedModel, w.SkippedFit)
}

func pct(milli int64, cards int) float64 { return float64(milli) / float64(cards) / 10 }

// qgpuNode is trace node n as the agent publishes it: the inventory
// annotation and the qGPU extended resources in status.allocatable
// (tracepods.NodeObject), named by scheduler_perf (generateName).
func qgpuNode(n *sim.Node) (*v1.Node, error) {
	node, err := tracepods.NodeObject("", n, 0)
	if err != nil {
		return nil, err
	}
	delete(node.Labels, "kubernetes.io/hostname")
	node.GenerateName = "node-"
	return node, nil
}

// stockNode is trace node n as a cluster without qGPU has it: its cards as
// the device plugin's nvidia.com/gpu and GPU feature discovery's model
// label, its CPU and memory.
func stockNode(n *sim.Node) (*v1.Node, error) {
	node, err := qgpuNode(n)
	if err != nil {
		return nil, err
	}
	node.Annotations = nil
	node.Labels = map[string]string{modelLabel: n.Model}
	for _, l := range []v1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		for name := range l {
			if strings.HasPrefix(string(name), "tke.cloud.tencent.com/") {
				delete(l, name)
			}
		}
		l[stockGPU] = *resource.NewQuantity(int64(n.GPUs), resource.DecimalSI)
	}
	return node, nil
}

// qgpuPod is trace pod p as a qgpu-scheduler pod (tracepods.PodObject: its
// card share as qGPU memory and cores, its model filter as the use-gpu-type
// annotation, its CPU and memory), named by scheduler_perf.
func (w *Workload) qgpuPod(p *sim.Pod) *v1.Pod {
	pod := w.trace.PodObject("", p)
	pod.Namespace, pod.UID, pod.GenerateName = "", "", "pod-"
	return pod
}

// stockPod is trace pod p as a cluster without qGPU runs it: its CPU and
// memory, a whole nvidia.com/gpu for its card share, its model filter as
// a required node affinity on the model label; the default scheduler.
func stockPod(p *sim.Pod) *v1.Pod {
	pod := &v1.Pod{}
	pod.GenerateName = "pod-"
	c := v1.Container{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: v1.ResourceRequirements{
		Requests: v1.ResourceList{
			v1.ResourceCPU:    *resource.NewMilliQuantity(p.CPUMilli, resource.DecimalSI),
			v1.ResourceMemory: *resource.NewQuantity(p.MemoryMiB<<20, resource.BinarySI),
		}}}
	if p.NumGPU > 0 {
		n := *resource.NewQuantity(int64(p.NumGPU), resource.DecimalSI)
		c.Resources.Requests[stockGPU] = n
		c.Resources.Limits = v1.ResourceList{stockGPU: n}
	}
	pod.Spec.Containers = []v1.Container{c}
	if len(p.Models) > 0 {
		pod.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: modelLabel, Operator: v1.NodeSelectorOpIn, Values: p.Models}},
			}}},
		}}
	}
	return pod
}
