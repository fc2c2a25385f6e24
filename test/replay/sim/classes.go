package sim

import (
	"fmt"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Classes mixes online and offline pods into a qgpu-mode replay, to measure
// how general pods keeping off mixed nodes (docs/design.md) leaves room for
// those classes. The trace has no classes; which nodes are mixed and which
// pods are online or offline is a fixed function of their names, the same
// for every seed and policy.
type Classes struct {
	// MixedPct is the share of nodes, in percent, labelled mixed: the nodes
	// whose placement.NodeRank is below MixedPct×RankRange/100.
	MixedPct int
	// SharedPct is the share, in percent, of the pods that take part of one
	// card which are online or offline instead of general (half each, by
	// a hash of the pod's name).
	SharedPct int
	// MixedAlike makes general pods treat mixed nodes as any other, as the
	// scheduler did before it kept them off (the baseline of the measure).
	MixedAlike bool
}

// Validate names the first field out of range.
func (c Classes) Validate() error {
	switch {
	case c.MixedPct < 0 || c.MixedPct > 100:
		return fmt.Errorf("mixed-nodes %d: want a percentage 0..100", c.MixedPct)
	case c.SharedPct < 0 || c.SharedPct > 100:
		return fmt.Errorf("class-pods %d: want a percentage 0..100", c.SharedPct)
	case c.SharedPct > 0 && c.MixedPct == 0:
		return fmt.Errorf("class-pods %d with mixed-nodes 0: online and offline pods fit only on mixed nodes", c.SharedPct)
	}
	return nil
}

// mixedNodes marks the mixed nodes.
func (c Classes) mixedNodes(nodes []Node) []bool {
	out := make([]bool, len(nodes))
	for i := range nodes {
		out[i] = placement.NodeRank(nodes[i].Name) < int64(c.MixedPct)*placement.RankRange/100
	}
	return out
}

// class is the pod's class: online or offline for SharedPct of the pods
// that take part of one card, general for the others.
func (c Classes) class(p *Pod) protocol.Class {
	if c.SharedPct == 0 || p.NumGPU != 1 || p.GPUMilli >= 1000 {
		return protocol.ClassGeneral
	}
	v := placement.NameHash(p.Name)
	switch {
	case int(v%100) >= c.SharedPct:
		return protocol.ClassGeneral
	case v/100%2 == 0:
		return protocol.ClassOnline
	default:
		return protocol.ClassOffline
	}
}

// asClass turns a general share-of-a-card request into the class's: an
// online pod holds memory only, an offline pod its memory and, as greedy
// cores, the share of compute it asked for.
func asClass(r *request.Request, class protocol.Class) *request.Request {
	if class == protocol.ClassGeneral {
		return r
	}
	out := *r
	out.Class = class
	c := r.Containers[0]
	if class == protocol.ClassOnline {
		c.Cores = 0
	}
	out.Containers = []request.Container{c}
	return &out
}
