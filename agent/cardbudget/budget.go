// Package cardbudget is the node's last line behind the scheduler's ledger
// (docs/ledger.md#the-agents-last-line): what the holders of a node's
// cards hold, the device plugins' grants and the prepared DRA claims alike
// (one card, one budget), and the refusal of a slice that would take a
// card past its memory, its 100 general cores or its 100 offline greedy
// cores, or put general slices on a card with online or offline ones.
//
// The pods-per-card limit is not checked here: it is the scheduler's
// argument (maxPodsPerCard), which the node does not know, and checking
// the default would refuse pods a scheduler configured above it placed.
package cardbudget

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ErrOverCapacity is wrapped when a slice would take one of the node's
// cards past what it has: the scheduler's ledger should never let that
// happen, and if it does (a bug, an allocation written past the admission
// policy), the card is really oversubscribed. test/chaos looks for its text.
var ErrOverCapacity = errors.New("grant would oversubscribe a card")

// Use is what one holder takes of one card.
type Use struct {
	// Holder names the holder in a refusal (ns/pod/container, claim ns/name).
	Holder    string
	Class     protocol.Class
	Index     int
	UUID      string
	MemoryGiB int64
	// Cores are a general holder's qgpu-core or an offline holder's
	// qgpu-core-greedy; online holders hold none.
	Cores int64
}

// GrantUses are what a device plugin's grant holds: a memory grant its
// slices' memory, a qgpu-core grant of a general pod and a
// qgpu-core-greedy grant of an offline pod their cores. Every grant holds
// its class on its cards.
func GrantUses(g store.Grant) []Use {
	holder := g.Namespace + "/" + g.Name + "/" + g.Container
	out := make([]Use, 0, len(g.Slices))
	for _, s := range g.Slices {
		u := Use{Holder: holder, Class: g.Class, Index: s.Index, UUID: s.UUID}
		switch {
		case g.Resource == protocol.ResourceMemory:
			u.MemoryGiB = s.MemoryGiB
		case g.Resource == protocol.ResourceCore && g.Class == protocol.ClassGeneral,
			g.Resource == protocol.ResourceCoreGreedy && g.Class == protocol.ClassOffline:
			u.Cores = s.Cores
		}
		out = append(out, u)
	}
	return out
}

// SliceUse is what a slice held whole takes (a prepared claim's request):
// its memory and, but for an online slice, its cores.
func SliceUse(holder string, class protocol.Class, s protocol.Slice) Use {
	u := Use{Holder: holder, Class: class, Index: s.Index, UUID: s.UUID, MemoryGiB: s.MemoryGiB}
	if class != protocol.ClassOnline {
		u.Cores = s.Cores
	}
	return u
}

// LivePods are the UIDs of pods that have not terminated: the kubelet
// frees a terminated pod's devices, so its grants hold nothing.
func LivePods(pods []*v1.Pod) map[string]bool {
	out := make(map[string]bool, len(pods))
	for _, p := range pods {
		if p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
			out[string(p.UID)] = true
		}
	}
	return out
}

// Budget is what is held of a node's cards.
type Budget struct {
	cards []protocol.Card
	held  map[string]*card // by UUID
}

// card is what is held of one card, and by whom.
type card struct {
	memory, cores, greedy       int64
	memoryBy, coresBy, greedyBy []string
	// general and shared are the holders of general slices, and of
	// online or offline ones.
	general, shared []string
}

// New is an empty budget of cards.
func New(cards []protocol.Card) *Budget {
	return &Budget{cards: cards, held: map[string]*card{}}
}

// Hold counts uses as held, whether they fit or not: what the node
// handed out is held until it is given back.
func (b *Budget) Hold(uses ...Use) {
	for _, u := range uses {
		b.card(u.UUID).add(u)
	}
}

// Take refuses the first of uses that names a card the node does not
// have or does not fit beside what is held, counting the uses before it;
// else it holds them all. After a refusal the budget is partly taken.
func (b *Budget) Take(uses ...Use) error {
	for _, u := range uses {
		i := slices.IndexFunc(b.cards, func(c protocol.Card) bool { return c.UUID == u.UUID })
		if i < 0 {
			return fmt.Errorf("%w: the slice names card %d (%s), which this node does not have", ErrOverCapacity, u.Index, u.UUID)
		}
		if err := b.card(u.UUID).fits(u, b.cards[i]); err != nil {
			return err
		}
		b.card(u.UUID).add(u)
	}
	return nil
}

func (b *Budget) card(uuid string) *card {
	c := b.held[uuid]
	if c == nil {
		c = &card{}
		b.held[uuid] = c
	}
	return c
}

func (c *card) add(u Use) {
	if u.MemoryGiB > 0 {
		c.memory += u.MemoryGiB
		c.memoryBy = append(c.memoryBy, fmt.Sprintf("%s %d GiB", u.Holder, u.MemoryGiB))
	}
	switch u.Class {
	case protocol.ClassGeneral:
		c.general = appendOnce(c.general, u.Holder+" general")
		if u.Cores > 0 {
			c.cores += u.Cores
			c.coresBy = append(c.coresBy, fmt.Sprintf("%s %d cores", u.Holder, u.Cores))
		}
	case protocol.ClassOnline, protocol.ClassOffline:
		c.shared = appendOnce(c.shared, u.Holder+" "+string(u.Class))
		if u.Class == protocol.ClassOffline && u.Cores > 0 {
			c.greedy += u.Cores
			c.greedyBy = append(c.greedyBy, fmt.Sprintf("%s %d cores", u.Holder, u.Cores))
		}
	}
}

// fits applies the card rules of docs/design.md#how-a-card-is-accounted
// to u beside what is held of card hw.
func (c *card) fits(u Use, hw protocol.Card) error {
	over := func(what string, held, asked, capacity int64, unit string, by []string) error {
		return fmt.Errorf("%w: %s on card %d (%s): %d %s already held + %d %s asked > the card's %d %s (held by %s)",
			ErrOverCapacity, what, hw.Index, hw.UUID, held, unit, asked, unit, capacity, unit, holders(by))
	}
	if u.MemoryGiB > 0 && c.memory+u.MemoryGiB > hw.MemoryGiB() {
		return over("memory", c.memory, u.MemoryGiB, hw.MemoryGiB(), "GiB", c.memoryBy)
	}
	switch u.Class {
	case protocol.ClassGeneral:
		if len(c.shared) > 0 {
			return fmt.Errorf("%w: card %d (%s): a general slice never shares a card with online or offline ones (held by %s)",
				ErrOverCapacity, hw.Index, hw.UUID, holders(c.shared))
		}
		if u.Cores > 0 && c.cores+u.Cores > protocol.CoresPerCard {
			return over("cores", c.cores, u.Cores, protocol.CoresPerCard, "cores", c.coresBy)
		}
	case protocol.ClassOnline, protocol.ClassOffline:
		if len(c.general) > 0 {
			return fmt.Errorf("%w: card %d (%s): an %s slice never shares a card with general ones (held by %s)",
				ErrOverCapacity, hw.Index, hw.UUID, u.Class, holders(c.general))
		}
		if u.Class == protocol.ClassOffline && u.Cores > 0 && c.greedy+u.Cores > protocol.CoresPerCard {
			return over("greedy cores", c.greedy, u.Cores, protocol.CoresPerCard, "cores", c.greedyBy)
		}
	}
	return nil
}

func holders(by []string) string {
	if len(by) == 0 {
		return "nobody"
	}
	return strings.Join(by, ", ")
}

func appendOnce(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}
