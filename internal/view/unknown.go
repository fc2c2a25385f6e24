package view

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ReasonNodeGone is the Invalid reason of a node that pods are bound to but
// that has no Node object.
const ReasonNodeGone = "no Node object"

// unknownCardMiB is the memory given to the cards the checker makes up for a
// node whose capacity is unknown (coverUnknown): the largest an inventory may
// declare, so that memory is never judged there, while cores, core-greedy and
// class mixing, whose capacity is the same on every card, still are.
const unknownCardMiB = 16 << 20

// live reports whether the pod is bound, not terminal, and holds an assignment.
func (p Pod) live() bool {
	terminal := p.Phase == v1.PodSucceeded || p.Phase == v1.PodFailed
	return p.Node != "" && !terminal && p.Assignment != nil
}

// holdingNodes are the names of the nodes that live pods hold slices on, sorted.
func (c *Cluster) holdingNodes() []string {
	seen := sets.New[string]()
	for _, p := range c.Pods {
		if p.live() {
			seen.Insert(p.Node)
		}
	}
	return sets.List(seen)
}

// unknown is why a node's capacity is unknown: it has no Node object or no
// valid inventory. Empty when the inventory is known.
func (c *Cluster) unknown(node string) string {
	f, ok := c.facts[node]
	if !ok {
		return ReasonNodeGone
	}
	return f.invalid
}

// coverUnknown gives every node that holds live pods but whose capacity is
// unknown the cards its pods' assignments and grants name, so that the
// checks that need no capacity (cores, core-greedy, classes mixed, and pods
// per card when maxPodsPerCard is set) still run there. The made-up cards
// are unhealthy, so that nothing counts them as room.
func (c *Cluster) coverUnknown() {
	for _, name := range c.holdingNodes() {
		reason := c.unknown(name)
		if reason == "" {
			continue
		}
		var cards []protocol.Card
		add := func(a *protocol.Assignment) {
			for _, ca := range a.Containers {
				for _, s := range ca.Slices {
					if !slices.ContainsFunc(cards, func(x protocol.Card) bool { return x.Index == s.Index && x.UUID == s.UUID }) {
						cards = append(cards, protocol.Card{Index: s.Index, UUID: s.UUID, MemoryMiB: unknownCardMiB})
					}
				}
			}
		}
		for _, p := range c.Pods {
			if p.live() && p.Node == name {
				add(p.Assignment)
				if p.Grant != nil {
					add(p.Grant)
				}
			}
		}
		inv := &protocol.Inventory{Version: protocol.InventoryVersion, Cards: cards}
		mixed := c.facts[name].mixed
		c.ledger.SetNode(name, inv, reason, mixed)
		c.granted.SetNode(name, inv, reason, mixed)
	}
}

// checkUnknown reports every node that holds live pods while its capacity is
// unknown: no card there can be shown to be within its memory (or its pod
// limit), so the checker does not answer 0 for it.
func (c *Cluster) checkUnknown() []Violation {
	var out []Violation
	for _, name := range c.holdingNodes() {
		reason := c.unknown(name)
		if reason == "" {
			continue
		}
		var pods []string
		for _, p := range c.Pods {
			if p.live() && p.Node == name {
				pods = append(pods, p.Key())
			}
		}
		out = append(out, Violation{"NodeUnknown", name, fmt.Sprintf("%d qGPU pods hold slices on a node whose capacity is unknown (%s): %s",
			len(pods), reason, strings.Join(pods, ", "))})
	}
	return out
}
