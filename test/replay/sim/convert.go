package sim

import (
	"fmt"
	"strings"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Mode is the unit of accounting.
type Mode string

const (
	// Paper accounts GPU-milli only, as the paper's simulator did: a card is
	// 1000 units of "memory", shared pods take their milli, whole-card pods
	// take empty cards; no pod limit per card.
	Paper Mode = "paper"
	// QGPU turns each pod into qGPU memory (GiB) and cores and applies the
	// full accounting of docs/design.md#how-a-card-is-accounted, the memory/4 pod limit included.
	QGPU Mode = "qgpu"
)

// paperMaxPods is "no limit" for paper mode (the smallest trace pod is 50 milli).
const paperMaxPods = 1 << 20

// CardMemoryMiB is the simulator's card memory table (traces README).
var CardMemoryMiB = map[string]int64{
	"T4": 15109, "V100M16": 16160, "P100": 16280, "A10": 22731, "V100M32": 32510, "G2": 20000, "G3": 30000,
}

// cardMiB is a model's memory; unknown models count as the smallest known.
func cardMiB(model string) int64 {
	if m, ok := CardMemoryMiB[model]; ok {
		return m
	}
	return CardMemoryMiB["T4"]
}

// Cards are a node's cards in the mode's units.
func (m Mode) Cards(n *Node) []ledger.Card {
	out := make([]ledger.Card, n.GPUs)
	for i := range out {
		c := ledger.Card{Index: i, UUID: fmt.Sprintf("%s-%d", n.Name, i), Model: n.Model, Healthy: true,
			MemoryGiB: 1000, MaxPods: paperMaxPods}
		if m == QGPU {
			mib := cardMiB(n.Model)
			c.MemoryGiB, c.MaxPods = mib/protocol.GiB, ledger.DefaultMaxPodsMiB(mib)
		}
		out[i] = c
	}
	return out
}

// Converter turns trace pods into requests; in qgpu mode a pod's memory is
// its share of the smallest card it may land on.
type Converter struct {
	Mode Mode
	// minMiB is the smallest card memory in the cluster.
	minMiB int64
}

// NewConverter prepares conversions for a cluster.
func NewConverter(mode Mode, nodes []Node) *Converter {
	c := &Converter{Mode: mode}
	for i := range nodes {
		if mib := cardMiB(nodes[i].Model); nodes[i].GPUs > 0 && (c.minMiB == 0 || mib < c.minMiB) {
			c.minMiB = mib
		}
	}
	return c
}

// Request is the pod's qGPU request: no containers for a CPU-only pod.
func (c *Converter) Request(p *Pod) *request.Request {
	r := &request.Request{Class: protocol.ClassGeneral}
	for _, m := range p.Models {
		r.UseTypes = append(r.UseTypes, strings.ToLower(m))
	}
	if p.NumGPU > 0 {
		r.Containers = []request.Container{c.container(p)}
	}
	return r
}

func (c *Converter) container(p *Pod) request.Container {
	whole := p.GPUMilli >= 1000 || p.NumGPU > 1
	k := int64(p.NumGPU)
	mem, cores := p.GPUMilli, int64(0) // paper: milli as memory, no cores
	if c.Mode == QGPU {
		mem = max(1, ceilDiv(p.GPUMilli*c.minMiB, 1000*protocol.GiB))
		cores = ceilDiv(p.GPUMilli, 10)
	}
	if whole {
		return request.Container{Name: "c", MemoryGiB: mem * k, Cores: protocol.CoresPerCard * k, Cards: p.NumGPU, Whole: true}
	}
	return request.Container{Name: "c", MemoryGiB: mem, Cores: cores, Cards: 1}
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// Workload is FGD's target workload for the product's policies: the
// simulator's typical pods (typicalShapes: by CPU, GPU share, card count
// and model list, covering 95% of the trace's pods, weights renormalised)
// in the mode's units.
func (c *Converter) Workload(pods []Pod) *placement.Workload {
	t := typicalShapes(pods)
	shapes := make([]placement.Shape, 0, len(t.shapes))
	for _, ts := range t.shapes {
		s := placement.Shape{CPUMilli: ts.cpu, Weight: ts.weight}
		for _, m := range ts.models {
			s.UseTypes = append(s.UseTypes, strings.ToLower(m))
		}
		if ts.num > 0 {
			ct := c.container(&Pod{NumGPU: ts.num, GPUMilli: ts.milli})
			s.Cards, s.Whole = ct.Cards, ct.Whole
			s.MemoryGiB, s.Cores = ct.PerCardMemoryGiB(), ct.PerCardCores()
		}
		shapes = append(shapes, s)
	}
	return placement.NewWorkload(shapes)
}
