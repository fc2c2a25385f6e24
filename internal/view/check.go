package view

import (
	"fmt"
	"reflect"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

// Violation is one broken invariant.
type Violation struct {
	Kind, Object, Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s %s: %s", v.Kind, v.Object, v.Detail) }

// Check reports every card over its capacity (memory, cores per class, pods,
// classes mixed), every bound qGPU pod without the scheduler's assignment,
// and every agent grant that disagrees with the assignment.
func (c *Cluster) Check() []Violation {
	var out []Violation
	for _, n := range c.Nodes {
		for _, card := range n.Cards {
			if d := cardProblem(card); d != "" {
				out = append(out, Violation{"Oversubscribed", fmt.Sprintf("%s/card%d", n.Name, card.Index), d})
			}
		}
	}
	for _, p := range c.Unassigned {
		out = append(out, Violation{"Unassigned", p.Key(), "bound qGPU pod without a scheduler assignment: " + p.Problem})
	}
	for _, p := range c.Pods {
		terminal := p.Phase == v1.PodSucceeded || p.Phase == v1.PodFailed
		if p.Grant != nil && p.Assignment != nil && !terminal && !sameSlices(p.Assignment, p.Grant) {
			out = append(out, Violation{"GrantMismatch", p.Key(), "the agent granted other slices than the scheduler assigned"})
		}
	}
	return out
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
