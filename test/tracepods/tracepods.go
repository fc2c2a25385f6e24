// Package tracepods turns the openb trace's pods and nodes into the pods and
// nodes of qgpu-scheduler, for the measurements of its cost on real shapes:
// BenchmarkPolicies (plugins/qgpu) and make bench-throughput's --pods-from.
// The trace is read by path at run time, never committed
// (docs/performance.md#cost-of-filter-and-score); Generated stands in for it
// where it is absent.
package tracepods

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

// The trace's files this package reads from a directory ($QGPU_TRACES).
const (
	NodeList = "openb_node_list_gpu_node.csv"
	// PodList is the variant with the most model filters: one pod in ten
	// names the card models it accepts ("V100M16|V100M32"), 249 distinct
	// shapes.
	PodList = "openb_pod_list_gpuspec10.csv"
)

// Trace is a cluster's nodes and the pods that arrive there, in the replay's
// terms (qgpu mode: memory in GiB of the smallest card, cores).
type Trace struct {
	// Source says where the pods came from: a file, or "generated".
	Source string
	Nodes  []sim.Node
	Pods   []sim.Pod
	conv   *sim.Converter
}

// Read reads the node list and the pods of pods (a pod list CSV; relative
// to dir when not absolute).
func Read(dir, pods string) (*Trace, error) {
	nodes, err := sim.ReadNodes(filepath.Join(dir, NodeList))
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(pods) {
		pods = filepath.Join(dir, pods)
	}
	list, err := sim.ReadPods(pods)
	if err != nil {
		return nil, err
	}
	return newTrace(pods, nodes, list), nil
}

// FromEnv is Read of $QGPU_TRACES's PodList, or Generated when the variable
// is unset or its directory lacks the files.
func FromEnv() (*Trace, error) {
	dir := os.Getenv("QGPU_TRACES")
	if dir == "" {
		return Generated(), nil
	}
	for _, f := range []string{NodeList, PodList} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return Generated(), nil
		}
	}
	return Read(dir, PodList)
}

func newTrace(source string, nodes []sim.Node, pods []sim.Pod) *Trace {
	return &Trace{Source: source, Nodes: nodes, Pods: pods, conv: sim.NewConverter(sim.QGPU, nodes)}
}

// Request is what the scheduler reads from the pod's object (PodObject): a
// qGPU container, or none for a pod without cards.
func (t *Trace) Request(p *sim.Pod) *request.Request { return t.conv.Request(p) }

// PodObject is trace pod p as a pod of qgpu-scheduler named name: its qGPU
// container (Request), its model filter as the use-gpu-type annotation, its
// CPU and memory.
func (t *Trace) PodObject(name string, p *sim.Pod) *v1.Pod {
	req := t.Request(p)
	b := builders.GPUPod(name)
	if len(req.Containers) > 0 {
		c := req.Containers[0]
		b.General("c", c.MemoryGiB, c.Cores)
		if len(req.UseTypes) > 0 {
			b.Annotation(protocol.AnnotationUseGPUType, strings.Join(req.UseTypes, ","))
		}
	}
	pod := b.CPU(p.CPUMilli).Obj()
	pod.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = *resource.NewQuantity(p.MemoryMiB<<20, resource.BinarySI)
	return pod
}

// NodeObject is trace node n as a qGPU node of its cards (the trace's model
// names, sim.CardMemoryMiB's memory), CPU and memory; gpus > 0 overrides its
// number of cards, its CPU and memory then scaled to keep their share per
// card.
func NodeObject(name string, n *sim.Node, gpus int) (*v1.Node, error) {
	mib, ok := sim.CardMemoryMiB[n.Model]
	if !ok {
		return nil, fmt.Errorf("node %s: model %q has no memory in sim.CardMemoryMiB", n.Name, n.Model)
	}
	cpu, mem := n.CPUMilli, n.MemoryMiB
	if gpus > 0 && n.GPUs > 0 && gpus != n.GPUs {
		cpu, mem = cpu*int64(gpus)/int64(n.GPUs), mem*int64(gpus)/int64(n.GPUs)
	} else {
		gpus = n.GPUs
	}
	node := builders.GPUNode(name, false, builders.Cards(gpus, n.Model, mib))
	for _, l := range []v1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		l[v1.ResourceCPU] = *resource.NewMilliQuantity(cpu, resource.DecimalSI)
		l[v1.ResourceMemory] = *resource.NewQuantity(mem<<20, resource.BinarySI)
		l[v1.ResourcePods] = *resource.NewQuantity(1000, resource.DecimalSI)
	}
	return node, nil
}

// Accepted reports whether some node of the trace has a model p accepts:
// the trace holds pods of models no node has (A10), which no scheduler
// places.
func (t *Trace) Accepted(p *sim.Pod) bool {
	req := t.Request(p)
	for i := range t.Nodes {
		if t.Nodes[i].GPUs > 0 && req.MatchesModel(t.Nodes[i].Model) {
			return true
		}
	}
	return false
}

// Generated is a cluster and pods that mimic the trace where it is absent:
// the trace's card models in about its proportions, its share of pods
// without cards (13 %), of whole and multi-card pods, and one pod in ten
// with a model filter from the trace's list, in some 250 distinct shapes. A
// fixed seed: every call is the same.
func Generated() *Trace {
	rng := rand.New(rand.NewSource(1))
	models := []struct {
		model string
		nodes int
	}{{"G2", 549}, {"T4", 404}, {"P100", 134}, {"V100M16", 55}, {"G3", 39}, {"V100M32", 30}}
	var nodes []sim.Node
	for _, m := range models {
		for i := range m.nodes {
			nodes = append(nodes, sim.Node{Name: fmt.Sprintf("gen-%s-%03d", strings.ToLower(m.model), i),
				CPUMilli: 96000, MemoryMiB: 786432, GPUs: []int{8, 8, 4, 2}[i%4], Model: m.model})
		}
	}
	filters := [][]string{{"T4"}, {"G2"}, {"P100"}, {"V100M16", "V100M32"}, {"P100", "V100M16", "V100M32"},
		{"G2", "P100", "T4", "V100M16", "V100M32"}, {"G3"}}
	cpus := []int64{1000, 2000, 4000, 6000, 8000, 12000, 16000, 24000, 32000}
	millis := []int64{0, 50, 100, 200, 250, 300, 460, 500, 700, 1000}
	pods := make([]sim.Pod, 8152)
	for i := range pods {
		p := sim.Pod{Name: fmt.Sprintf("gen-pod-%04d", i), CPUMilli: cpus[rng.Intn(len(cpus))], MemoryMiB: 16384}
		switch k := rng.Intn(100); {
		case k < 13: // no cards
		case k < 14:
			p.NumGPU, p.GPUMilli = 1<<(1+rng.Intn(3)), 1000
		default:
			p.NumGPU, p.GPUMilli = 1, millis[1+rng.Intn(len(millis)-1)]
		}
		if p.NumGPU > 0 && rng.Intn(10) == 0 {
			p.Models = filters[rng.Intn(len(filters))]
		}
		pods[i] = p
	}
	return newTrace("generated", nodes, pods)
}
