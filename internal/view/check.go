package view

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

// Violation is one broken invariant.
type Violation struct {
	Kind, Object, Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s %s: %s", v.Kind, v.Object, v.Detail) }

// Check reports every card over its capacity (memory, cores per class, pods,
// classes mixed) by the assignments or by what the agents granted, on every
// node that holds qGPU pods, labelled or not; every node that holds them
// while its capacity is unknown (NodeUnknown); every bound qGPU pod without
// the scheduler's assignment; every slice on a card the inventory does not
// list, or other than the pod asked for, or on a model its filters exclude
// (checkPods); and every agent grant that disagrees with the assignment so
// that some card's totals differ. A balanced swap between pods with
// identical requests is no violation: it is listed by Swapped. What the
// scheduler may not have known is listed by Warnings.
func (c *Cluster) Check() []Violation {
	var out []Violation
	for _, n := range c.allNodes() {
		for _, card := range n.Cards {
			if d := cardProblem(card); d != "" {
				out = append(out, Violation{"Oversubscribed", fmt.Sprintf("%s/card%d", n.Name, card.Index), d})
			}
		}
	}
	for _, p := range c.Unassigned {
		out = append(out, Violation{"Unassigned", p.Key(), "bound qGPU pod without a scheduler assignment: " + p.Problem})
	}
	for _, p := range c.mismatched() {
		if c.balanced(p.Node) {
			continue // a swap of twins: every card's totals are right (Swapped)
		}
		out = append(out, Violation{"GrantMismatch", p.Key(), fmt.Sprintf("the agent granted other slices than the scheduler assigned on %s: assigned %s, granted %s",
			p.Node, describe(p.Assignment), describe(p.Grant))})
	}
	out = append(out, c.checkGranted()...)
	out = append(out, c.checkUnknown()...)
	return append(out, c.checkPods()...)
}

// allNodes are the labelled nodes, then the others that hold qGPU pods.
func (c *Cluster) allNodes() []Node {
	return append(append([]Node(nil), c.Nodes...), c.Other...)
}

func cardProblem(c ledger.Card) string {
	switch {
	case c.UsedMemoryGiB > c.MemoryGiB:
		return fmt.Sprintf("memory %d GiB held, capacity %d GiB", c.UsedMemoryGiB, c.MemoryGiB)
	case c.UsedCores > protocol.CoresPerCard:
		return fmt.Sprintf("general pods hold %d cores, capacity 100", c.UsedCores)
	case c.UsedGreedy > protocol.CoresPerCard:
		return fmt.Sprintf("offline pods hold %d core-greedy, capacity 100", c.UsedGreedy)
	case c.Pods() > c.MaxPods:
		return fmt.Sprintf("%d pods, limit %d", c.Pods(), c.MaxPods)
	case c.General > 0 && c.Online+c.Offline > 0:
		return fmt.Sprintf("general pods (%d) share the card with online (%d) or offline (%d) pods", c.General, c.Online, c.Offline)
	}
	return ""
}

func sameSlices(a, b *protocol.Assignment) bool {
	return a.Class == b.Class && reflect.DeepEqual(a.Containers, b.Containers)
}

// describe is an assignment in one line: per container, card index, GiB, cores.
func describe(a *protocol.Assignment) string {
	var b strings.Builder
	for i, c := range a.Containers {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s:", c.Name)
		for _, s := range c.Slices {
			fmt.Fprintf(&b, " card%d %dGiB %dc", s.Index, s.MemoryGiB, s.Cores)
		}
	}
	return b.String()
}
