package view

import (
	"fmt"
	"strings"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// card finds the card a slice names in its node's inventory, by index and
// UUID (a card replaced at the same index is another card).
func (c *Cluster) card(node string, s protocol.Slice) (protocol.Card, bool) {
	for _, card := range c.facts[node].cards {
		if card.Index == s.Index && card.UUID == s.UUID {
			return card, true
		}
	}
	return protocol.Card{}, false
}

// checkPods judges each live pod's slices on their own: every slice of its
// assignment and grant names a card of the node's inventory (UnknownCard;
// a slice on no card is counted nowhere, so it could hide an
// oversubscription), each container holds exactly what it asked for
// (RequestMismatch), and each assigned card's model passes the pod's model
// filters (ModelFilter).
func (c *Cluster) checkPods() []Violation {
	var out []Violation
	for _, p := range c.Pods {
		if !p.live() {
			continue
		}
		records := []struct {
			what string
			a    *protocol.Assignment
		}{{"assignment", p.Assignment}}
		if p.Grant != nil && !sameSlices(p.Assignment, p.Grant) {
			records = append(records, struct {
				what string
				a    *protocol.Assignment
			}{"grant", p.Grant})
		}
		req, problem := c.resolved(p)
		for _, r := range records {
			if d := requestProblem(req, problem, r.a); d != "" {
				out = append(out, Violation{"RequestMismatch", p.Key(), r.what + ": " + d})
			}
			if c.unknown(p.Node) != "" {
				continue // NodeUnknown
			}
			for _, s := range slicesOf(r.a) {
				card, ok := c.card(p.Node, s)
				switch {
				case !ok:
					out = append(out, Violation{"UnknownCard", p.Key(), fmt.Sprintf("%s: slice on card %d %q, which the inventory of %s does not list", r.what, s.Index, s.UUID, p.Node)})
				case r.what == "assignment" && p.req != nil && !p.req.MatchesModel(card.Model):
					out = append(out, Violation{"ModelFilter", p.Key(), fmt.Sprintf("assigned card %d of %s is a %q, which the pod's model filters exclude", s.Index, p.Node, card.Model)})
				}
			}
		}
	}
	return out
}

func slicesOf(a *protocol.Assignment) []protocol.Slice {
	var out []protocol.Slice
	for _, ca := range a.Containers {
		out = append(out, ca.Slices...)
	}
	return out
}

// requestProblem compares a record with the pod's request: the same class,
// and per container one slice of exactly the memory and cores asked for, or,
// for a whole-card request of 100·k, k slices of memory/k and 100 cores.
func requestProblem(req *request.Request, problem string, a *protocol.Assignment) string {
	if req == nil {
		return "the pod's request is not valid, yet it holds slices: " + problem
	}
	if a.Class != req.Class {
		return fmt.Sprintf("class %s, the pod is %s", a.Class, req.Class)
	}
	var probs []string
	held := map[string]bool{}
	for _, ca := range a.Containers {
		held[ca.Name] = true
		rc, ok := findContainer(req, ca.Name)
		if !ok {
			probs = append(probs, fmt.Sprintf("container %s asks for no qGPU resource", ca.Name))
			continue
		}
		if len(ca.Slices) != rc.Cards {
			probs = append(probs, fmt.Sprintf("container %s holds %d cards, asks for %d", ca.Name, len(ca.Slices), rc.Cards))
		}
		for _, s := range ca.Slices {
			if s.MemoryGiB != rc.PerCardMemoryGiB() || s.Cores != rc.PerCardCores() {
				probs = append(probs, fmt.Sprintf("container %s holds %d GiB %d cores on card %d, asks for %d GiB %d cores per card",
					ca.Name, s.MemoryGiB, s.Cores, s.Index, rc.PerCardMemoryGiB(), rc.PerCardCores()))
			}
		}
	}
	for _, rc := range req.Containers {
		if !held[rc.Name] {
			probs = append(probs, fmt.Sprintf("container %s holds nothing", rc.Name))
		}
	}
	return strings.Join(probs, "; ")
}

func findContainer(req *request.Request, name string) (request.Container, bool) {
	for _, rc := range req.Containers {
		if rc.Name == name {
			return rc, true
		}
	}
	return request.Container{}, false
}

// Warnings are the facts about live pods that the scheduler may not have
// known when it placed them, so they are not violations: an online or
// offline pod on a node that is not (or no longer) labelled mixed
// (NotMixedNode), and a slice on a card the inventory shows unhealthy
// (UnhealthyCard). Both labels and health change under running pods; the
// API keeps no record of when, so the checker cannot tell a late change from
// a wrong placement.
func (c *Cluster) Warnings() []Violation {
	var out []Violation
	for _, p := range c.Pods {
		if !p.live() || c.unknown(p.Node) != "" {
			continue
		}
		if p.Assignment.Class != protocol.ClassGeneral && !c.facts[p.Node].mixed {
			out = append(out, Violation{"NotMixedNode", p.Key(), fmt.Sprintf("an %s pod on %s, which is not labelled %s=%s",
				p.Assignment.Class, p.Node, protocol.LabelMixedEnable, protocol.LabelValueEnable)})
		}
		for _, s := range slicesOf(p.Assignment) {
			if card, ok := c.card(p.Node, s); ok && !card.Healthy {
				out = append(out, Violation{"UnhealthyCard", p.Key(), fmt.Sprintf("holds a slice of card %d of %s, which is unhealthy", s.Index, p.Node)})
			}
		}
	}
	return out
}

// resolved is the pod's request on its node's cards, as the scheduler
// resolves a relative one (memory in percent of a card, every card of the
// node): against the largest card its model filters accept.
func (c *Cluster) resolved(p Pod) (*request.Request, string) {
	if p.req == nil || !p.req.Relative() {
		return p.req, p.Problem
	}
	cards := c.facts[p.Node].cards
	var mem int64
	for _, card := range cards {
		if p.req.MatchesModel(card.Model) {
			mem = max(mem, card.MemoryGiB())
		}
	}
	r, err := p.req.Resolve(mem, len(cards))
	if err != nil {
		return nil, err.Error()
	}
	return r, p.Problem
}
