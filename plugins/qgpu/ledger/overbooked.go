package ledger

import (
	"fmt"
	"strings"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Rule names one of a card's rules (docs/ledger.md#the-rules-every-card-keeps).
type Rule string

// The card rules an overbooking can break.
const (
	RuleMemory Rule = "memory"
	RulePods   Rule = "pods"
	RuleCores  Rule = "cores"
	RuleGreedy Rule = "greedy"
	RuleClass  Rule = "class"
)

// Rules are every Rule, for the metric's label values.
var Rules = []Rule{RuleMemory, RulePods, RuleCores, RuleGreedy, RuleClass}

// Overbooking is a card that a bound pod was recorded on beyond its rules
// (ObserveChecked): the card with the pod, and the rules broken that the
// pod's slice takes part in.
type Overbooking struct {
	Card  Card
	Rules []Rule
}

// String says what is over, e.g. "card 0 (GPU-…): memory 20 GiB of 14".
func (o Overbooking) String() string {
	c := &o.Card
	var parts []string
	for _, r := range o.Rules {
		switch r {
		case RuleMemory:
			parts = append(parts, fmt.Sprintf("memory %d GiB of %d", c.UsedMemoryGiB, c.MemoryGiB))
		case RulePods:
			parts = append(parts, fmt.Sprintf("pods %d of %d", c.Pods(), c.MaxPods))
		case RuleCores:
			parts = append(parts, fmt.Sprintf("qgpu-core %d of %d", c.UsedCores, protocol.CoresPerCard))
		case RuleGreedy:
			parts = append(parts, fmt.Sprintf("qgpu-core-greedy %d of %d", c.UsedGreedy, protocol.CoresPerCard))
		case RuleClass:
			parts = append(parts, fmt.Sprintf("general pods (%d) share it with online/offline pods (%d)", c.General, c.Online+c.Offline))
		}
	}
	return fmt.Sprintf("card %d (%s): %s", c.Index, c.UUID, strings.Join(parts, ", "))
}

// overbooked lists the cards h, already applied to cards, overbooks.
func overbooked(cards []Card, h *Holding) []Overbooking {
	var out []Overbooking
	for _, s := range h.perCard() {
		i := cardOf(cards, s)
		if i < 0 {
			continue
		}
		if rules := cards[i].overBy(h.Class, s.MemoryGiB, s.Cores); len(rules) > 0 {
			out = append(out, Overbooking{Card: cards[i], Rules: rules})
		}
	}
	return out
}

// overBy lists the rules the card, holding a pod's slice of the class with
// memory and cores, breaks with that slice's part in it: the rules Fits
// checks before a slice is taken, checked after. Health is not a capacity
// rule: a card can fail under the pods it holds.
func (c *Card) overBy(class protocol.Class, memoryGiB, cores int64) []Rule {
	var out []Rule
	if memoryGiB > 0 && c.UsedMemoryGiB > c.MemoryGiB {
		out = append(out, RuleMemory)
	}
	if c.Pods() > c.MaxPods {
		out = append(out, RulePods)
	}
	switch class {
	case protocol.ClassGeneral:
		if cores > 0 && c.UsedCores > protocol.CoresPerCard {
			out = append(out, RuleCores)
		}
		if c.Online+c.Offline > 0 {
			out = append(out, RuleClass)
		}
	case protocol.ClassOnline:
		if c.General > 0 {
			out = append(out, RuleClass)
		}
	case protocol.ClassOffline:
		if cores > 0 && c.UsedGreedy > protocol.CoresPerCard {
			out = append(out, RuleGreedy)
		}
		if c.General > 0 {
			out = append(out, RuleClass)
		}
	}
	return out
}
