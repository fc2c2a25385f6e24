package ledger

import (
	"slices"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Card is one card's capacity and what is held on it.
type Card struct {
	Index     int
	UUID      string
	Model     string
	MemoryGiB int64
	Healthy   bool
	// MaxPods is the card's pod limit (maxPodsPerCard, default MemoryGiB/4).
	MaxPods int

	UsedMemoryGiB int64
	// UsedCores is the qgpu-core held by general pods.
	UsedCores int64
	// UsedGreedy is the qgpu-core-greedy held by offline pods.
	UsedGreedy int64
	// Pods counts distinct pods by class.
	General, Online, Offline int
}

// Pods is the number of distinct pods holding a slice of the card.
func (c *Card) Pods() int { return c.General + c.Online + c.Offline }

// FreeMemoryGiB is the memory not yet held.
func (c *Card) FreeMemoryGiB() int64 { return c.MemoryGiB - c.UsedMemoryGiB }

// Empty reports whether no pod holds the card.
func (c *Card) Empty() bool { return c.Pods() == 0 }

// Fits reports whether one more pod of the class, asking for memory and cores
// in total on this card, keeps every rule of
// docs/design.md#how-a-card-is-accounted. newPod is false when
// the pod already holds a slice here (a second container of the same pod).
func (c *Card) Fits(class protocol.Class, memoryGiB, cores int64, newPod bool) bool {
	if !c.Healthy || memoryGiB > c.FreeMemoryGiB() {
		return false
	}
	if newPod && c.Pods() >= c.MaxPods {
		return false
	}
	switch class {
	case protocol.ClassGeneral:
		return c.Online+c.Offline == 0 && c.UsedCores+cores <= protocol.CoresPerCard
	case protocol.ClassOnline:
		return c.General == 0
	case protocol.ClassOffline:
		return c.General == 0 && c.UsedGreedy+cores <= protocol.CoresPerCard
	}
	return false
}

// Take adds a slice to the card, counting a new pod when newPod (false for
// a second container of a pod already here). Placement uses it on scratch copies.
func (c *Card) Take(class protocol.Class, memoryGiB, cores int64, newPod bool) {
	pods := 0
	if newPod {
		pods = 1
	}
	c.add(class, memoryGiB, cores, 1, pods)
}

// add applies (sign 1) or removes (sign -1) memory, cores and pods.
func (c *Card) add(class protocol.Class, memoryGiB, cores int64, sign, pods int) {
	c.UsedMemoryGiB += int64(sign) * memoryGiB
	switch class {
	case protocol.ClassGeneral:
		c.UsedCores += int64(sign) * cores
		c.General += sign * pods
	case protocol.ClassOnline:
		c.Online += sign * pods
	case protocol.ClassOffline:
		c.UsedGreedy += int64(sign) * cores
		c.Offline += sign * pods
	}
}

// Holding is what one pod holds on one node.
type Holding struct {
	Node  string
	Class protocol.Class
	// Namespace is the pod's, for the per-namespace quota (Watcher).
	Namespace string
	// Slices are all the pod's slices, over all its containers.
	Slices []protocol.Slice
	// Bound is set once the informer saw the pod bound to Node with this
	// assignment (Observe); until then the holding is assumed (Reserve).
	Bound bool
	// Uncertain is set on an assumed holding whose binding call ended
	// without a definite answer (MarkUncertain): the apiserver may hold the
	// pod bound with these slices, so Unreserve keeps them. Never set
	// together with Bound (uncertain.go).
	Uncertain bool
	// Since is the pod's version (its resourceVersion) the binding of an
	// Uncertain holding was conditioned on (Unbound).
	Since uint64
}

// clone copies the holding with its own Slices, so that callers changing
// their slices later cannot change what the ledger accounts.
func (h *Holding) clone() *Holding {
	c := *h
	c.Slices = slices.Clone(h.Slices)
	return &c
}

// perCard sums a holding per card index, so that a pod with two containers on
// one card counts as one pod there. It returns a small slice, usually of one.
func (h *Holding) perCard() []protocol.Slice {
	out := make([]protocol.Slice, 0, len(h.Slices))
next:
	for _, s := range h.Slices {
		for i := range out {
			if out[i].Index == s.Index {
				out[i].MemoryGiB += s.MemoryGiB
				out[i].Cores += s.Cores
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

// ApplyTo adds (sign 1) or removes (sign -1) the holding on a node's cards;
// slices on cards the node no longer has are skipped. A card is matched by
// index and UUID, so a card replaced at the same index does not inherit the
// old card's holdings.
func (h *Holding) ApplyTo(cards []Card, sign int) {
	for _, s := range h.perCard() {
		if i := cardOf(cards, s); i >= 0 {
			cards[i].add(h.Class, s.MemoryGiB, s.Cores, sign, 1)
		}
	}
}

// FitsOn reports whether the whole holding fits the cards as they are.
func (h *Holding) FitsOn(cards []Card) bool {
	for _, s := range h.perCard() {
		i := cardOf(cards, s)
		if i < 0 || !cards[i].Fits(h.Class, s.MemoryGiB, s.Cores, true) {
			return false
		}
	}
	return true
}

func cardOf(cards []Card, s protocol.Slice) int {
	for i := range cards {
		if cards[i].Index == s.Index && cards[i].UUID == s.UUID {
			return i
		}
	}
	return -1
}

// DefaultMaxPodsMiB applies the product's rule, a card holds at most its
// memory / 4 pods (docs/ledger.md), to the card's nominal size: the size it
// is sold with, which NVML reports a little below (a 16 GB T4 reports 15109
// MiB with ECC on, a 32 GB V100 32510 MiB). So a T4 holds 4 pods, as a V100
// holds 8.
func DefaultMaxPodsMiB(memoryMiB int64) int {
	return DefaultMaxPods(NominalGiB(memoryMiB))
}

// DefaultMaxPods is the rule on a nominal size in GiB: 32 → 8 pods, at least 1.
func DefaultMaxPods(memoryGiB int64) int {
	return max(1, int(memoryGiB/4))
}

// nominalSizes are the memory sizes, in GiB, that data-centre and
// workstation cards are sold with.
var nominalSizes = []int64{1, 2, 3, 4, 5, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 128, 141, 144, 180, 188, 192, 288}

// nominalShare is how far below its nominal size a card may report: the
// lowest seen is the T4's 92% (ECC and driver reservations); 90% keeps a card
// of an unlisted size from being rounded up to the next listed one.
const nominalShare = 0.90

// NominalGiB is the listed size a card reporting memoryMiB is sold with: the
// smallest one at or above the report, when the report is within
// nominalShare of it; else the report rounded to the nearest GiB.
func NominalGiB(memoryMiB int64) int64 {
	for _, gib := range nominalSizes {
		size := gib * protocol.GiB
		if size >= memoryMiB {
			if float64(memoryMiB) >= nominalShare*float64(size) {
				return gib
			}
			break
		}
	}
	return (memoryMiB + protocol.GiB/2) / protocol.GiB
}
