package view

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

// holdingOf flattens a (valid) assignment or grant into a ledger holding;
// a is used if set, else fallback.
func holdingOf(node string, a, fallback *protocol.Assignment) ledger.Holding {
	if a == nil {
		a = fallback
	}
	h := ledger.Holding{Node: node, Class: a.Class}
	for _, ca := range a.Containers {
		h.Slices = append(h.Slices, ca.Slices...)
	}
	return h
}

// checkGranted reports the cards that what the agents really handed out
// (grants) oversubscribes, unless the assignments already do (Oversubscribed).
func (c *Cluster) checkGranted() []Violation {
	var out []Violation
	for _, n := range c.allNodes() {
		g, _ := c.granted.CopyNode(n.Name, nil)
		for i, card := range g.Cards {
			if i < len(n.Cards) && cardProblem(n.Cards[i]) != "" {
				continue
			}
			if d := cardProblem(card); d != "" {
				out = append(out, Violation{"OversubscribedGranted", fmt.Sprintf("%s/card%d", n.Name, card.Index), "by the agents' grants: " + d})
			}
		}
	}
	return out
}

// balanced reports whether the grants of a node's pods load every card
// exactly as the assignments do: a grant differs from its assignment only
// by a swap between pods with identical requests (agent/allocate/README.md:
// the kubelet admitted twins in the other order), so every card's totals,
// and with them the scheduler's ledger, are right.
func (c *Cluster) balanced(node string) bool {
	a, _ := c.ledger.CopyNode(node, nil)
	g, _ := c.granted.CopyNode(node, nil)
	if len(a.Cards) != len(g.Cards) {
		return false
	}
	for i := range a.Cards {
		x, y := a.Cards[i], g.Cards[i]
		if x.UsedMemoryGiB != y.UsedMemoryGiB || x.UsedCores != y.UsedCores || x.UsedGreedy != y.UsedGreedy ||
			x.General != y.General || x.Online != y.Online || x.Offline != y.Offline {
			return false
		}
	}
	return true
}

// Swapped lists the running pods whose grant differs from their assignment
// by a balanced swap (see balanced): not a violation, but worth a look.
func (c *Cluster) Swapped() []string {
	var out []string
	for _, p := range c.mismatched() {
		if c.balanced(p.Node) {
			out = append(out, p.Key())
		}
	}
	return out
}

func (c *Cluster) mismatched() []Pod {
	var out []Pod
	for _, p := range c.Pods {
		terminal := p.Phase == v1.PodSucceeded || p.Phase == v1.PodFailed
		if p.Grant != nil && p.Assignment != nil && p.Node != "" && !terminal && !sameSlices(p.Assignment, p.Grant) {
			out = append(out, p)
		}
	}
	return out
}
