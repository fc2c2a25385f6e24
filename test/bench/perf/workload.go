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
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

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

// Files are the paths WriteFiles wrote.
type Files struct {
	// Config is scheduler_perf's test-case file for run r (RunConfig).
	dir string
	// Templates by name (qgpu-node, stock-node, qgpu-fill, ...).
	Templates map[string]string
	// NoopProfile is the QGPU profile with the no-op plugin in its place.
	NoopProfile string
}

// WriteFiles writes the node and pod templates into dir, and the no-op
// profile made from qgpuProfile (config/qgpu-scheduler.yaml's bytes) with
// noopName in QGPU's place.
func (w *Workload) WriteFiles(dir string, qgpuProfile []byte, noopName string) (*Files, error) {
	f := &Files{dir: dir, Templates: map[string]string{}}
	nodes := func(conv func(*sim.Node) (*v1.Node, error)) ([]any, error) {
		out := make([]any, len(w.Nodes))
		for i := range w.Nodes {
			n, err := conv(&w.Nodes[i])
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	}
	pods := func(list []sim.Pod, conv func(*sim.Pod) *v1.Pod) []any {
		out := make([]any, len(list))
		for i := range list {
			out[i] = conv(&list[i])
		}
		return out
	}
	qn, err := nodes(qgpuNode)
	if err != nil {
		return nil, err
	}
	sn, err := nodes(stockNode)
	if err != nil {
		return nil, err
	}
	for name, objs := range map[string][]any{
		"qgpu-node": qn, "stock-node": sn,
		"qgpu-fill": pods(w.Fill, w.qgpuPod), "qgpu-measured": pods(w.Measured, w.qgpuPod),
		"stock-fill": pods(w.Fill, stockPod), "stock-measured": pods(w.Measured, stockPod),
	} {
		t, err := Template(objs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(t), 0o644); err != nil {
			return nil, err
		}
		f.Templates[name] = path
	}
	noop, err := NoopProfile(qgpuProfile, "QGPU", noopName)
	if err != nil {
		return nil, err
	}
	f.NoopProfile = filepath.Join(dir, "noop-profile.yaml")
	return f, os.WriteFile(f.NoopProfile, noop, 0o644)
}

// keyAlphabet encodes a distinct object's number in two characters of a
// template's string constants (64*64 objects at most).
const keyAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// Template is a scheduler_perf template (text/template over .Index, with
// its mod function) that yields objs[.Index] (objs[.Index mod len(objs)]
// past the end): scheduler_perf's templates take one object per op, and
// the trace's pods come in hundreds of shapes, interleaved. Each distinct
// object is written once, as JSON (which is YAML); two string constants
// give each index's object number, and a chain of eq picks its text.
func Template(objs []any) (string, error) {
	if len(objs) == 0 {
		return "", fmt.Errorf("no objects")
	}
	var bodies []string
	num := map[string]int{}
	var hi, lo strings.Builder
	for _, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			return "", err
		}
		s := string(b)
		if strings.Contains(s, "{{") {
			return "", fmt.Errorf("object %s holds the template delimiter", s)
		}
		k, ok := num[s]
		if !ok {
			k = len(bodies)
			if k >= len(keyAlphabet)*len(keyAlphabet) {
				return "", fmt.Errorf("more than %d distinct objects", len(keyAlphabet)*len(keyAlphabet))
			}
			num[s] = k
			bodies = append(bodies, s)
		}
		hi.WriteByte(keyAlphabet[k/len(keyAlphabet)])
		lo.WriteByte(keyAlphabet[k%len(keyAlphabet)])
	}
	var t strings.Builder
	fmt.Fprintf(&t, "{{- $i := mod .Index %d -}}\n", len(objs))
	fmt.Fprintf(&t, "{{- $h := index %q $i -}}\n{{- $l := index %q $i -}}\n", hi.String(), lo.String())
	for k, s := range bodies {
		h, l := k/len(keyAlphabet), k%len(keyAlphabet)
		switch {
		case l == 0 && h == 0:
			fmt.Fprintf(&t, "{{if eq $h %d}}", keyAlphabet[h])
		case l == 0:
			fmt.Fprintf(&t, "{{end}}{{else if eq $h %d}}", keyAlphabet[h])
		}
		if l == 0 {
			fmt.Fprintf(&t, "{{if eq $l %d}}", keyAlphabet[l])
		} else {
			fmt.Fprintf(&t, "{{else if eq $l %d}}", keyAlphabet[l])
		}
		t.WriteString(s)
	}
	t.WriteString("{{end}}{{end}}\n")
	return t.String(), nil
}

// NoopProfile is the scheduler configuration profile with plugin from
// renamed to to in every plugin set, and from's pluginConfig dropped (the
// no-op plugin takes no args). Everything else, percentageOfNodesToScore
// and the other plugins included, stays.
func NoopProfile(profile []byte, from, to string) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(profile, &cfg); err != nil {
		return nil, err
	}
	profiles, _ := cfg["profiles"].([]any)
	renamed := 0
	for _, p := range profiles {
		pm, _ := p.(map[string]any)
		plugins, _ := pm["plugins"].(map[string]any)
		points := make([]string, 0, len(plugins))
		for point := range plugins {
			points = append(points, point)
		}
		sort.Strings(points)
		for _, point := range points {
			set, _ := plugins[point].(map[string]any)
			for _, list := range []string{"enabled", "disabled"} {
				items, _ := set[list].([]any)
				for _, it := range items {
					im, _ := it.(map[string]any)
					if im["name"] == from {
						im["name"] = to
						renamed++
					}
				}
			}
		}
		var kept []any
		pc, _ := pm["pluginConfig"].([]any)
		for _, c := range pc {
			if cm, _ := c.(map[string]any); cm["name"] != from {
				kept = append(kept, c)
			}
		}
		if kept == nil {
			delete(pm, "pluginConfig")
		} else {
			pm["pluginConfig"] = kept
		}
	}
	if renamed == 0 {
		return nil, fmt.Errorf("no plugin %s in the profile", from)
	}
	return yaml.Marshal(cfg)
}

// RunConfig is scheduler_perf's test-case file for run r: one test case
// per case in Order(r), each one workload ("<nodes>Nodes") that creates the
// nodes, the init pods (namespace init, not measured) and the measured pods
// (namespace measured, metrics collected). qgpuProfile is the QGPU
// profile's path; the stock case runs kube-scheduler's default
// configuration (no file). metrics is each test case's
// metricsCollectorConfig (nil: scheduler_perf's default).
func (f *Files) RunConfig(r int, w *Workload, qgpuProfile string, metrics any) (string, error) {
	type op = map[string]any
	var cases []map[string]any
	for _, c := range Order(r) {
		kind := "qgpu"
		if c == CaseStock {
			kind = "stock"
		}
		tc := map[string]any{
			"name":   c,
			"labels": []string{"performance"},
			"workloadTemplate": []op{
				{"opcode": "createNodes", "countParam": "$nodes", "nodeTemplatePath": f.Templates[kind+"-node"]},
				{"opcode": "createPods", "countParam": "$initPods", "podTemplatePath": f.Templates[kind+"-fill"], "namespace": "init"},
				{"opcode": "createPods", "countParam": "$measuredPods", "podTemplatePath": f.Templates[kind+"-measured"], "namespace": "measured", "collectMetrics": true},
			},
			"workloads": []map[string]any{{
				"name":   fmt.Sprintf("%dNodes", len(w.Nodes)),
				"labels": []string{"performance"},
				"params": map[string]int{"nodes": len(w.Nodes), "initPods": len(w.Fill), "measuredPods": len(w.Measured)},
			}},
		}
		if metrics != nil {
			tc["metricsCollectorConfig"] = metrics
		}
		switch c {
		case CaseQGPU:
			tc["schedulerConfigPath"] = qgpuProfile
		case CaseNoop:
			tc["schedulerConfigPath"] = f.NoopProfile
		}
		cases = append(cases, tc)
	}
	b, err := yaml.Marshal(cases)
	if err != nil {
		return "", err
	}
	path := filepath.Join(f.dir, fmt.Sprintf("run-%d.yaml", r))
	return path, os.WriteFile(path, b, 0o644)
}
