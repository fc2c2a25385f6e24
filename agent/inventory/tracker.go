// Package inventory keeps the node's cards with their current health and
// publishes them as the protocol.AnnotationInventory annotation on the Node.
package inventory

import (
	"errors"
	"fmt"
	"sync"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Tracker holds the cards and their health; it is safe for concurrent use.
// Subscribers are called, outside the lock, after every health change.
type Tracker struct {
	mu      sync.Mutex
	cards   []protocol.Card
	reasons map[string]string // by UUID: why the card is unhealthy
	subs    []func([]protocol.Card)
}

// ErrUnhealthy is wrapped by Grantable's refusal of an unhealthy card.
var ErrUnhealthy = errors.New("card unhealthy")

// NewTracker returns a tracker for cards (copied).
func NewTracker(cards []protocol.Card) *Tracker {
	return &Tracker{cards: append([]protocol.Card(nil), cards...), reasons: map[string]string{}}
}

// Cards returns a copy of the cards.
func (t *Tracker) Cards() []protocol.Card {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]protocol.Card(nil), t.cards...)
}

// Inventory returns the versioned inventory for the annotation.
func (t *Tracker) Inventory() *protocol.Inventory {
	return Build(t.Cards())
}

// Build returns the inventory of cards, ordered by index.
func Build(cards []protocol.Card) *protocol.Inventory {
	inv := &protocol.Inventory{Version: protocol.InventoryVersion, Cards: append([]protocol.Card{}, cards...)}
	sortByIndex(inv.Cards)
	return inv
}

func sortByIndex(cards []protocol.Card) {
	for i := 1; i < len(cards); i++ {
		for j := i; j > 0 && cards[j].Index < cards[j-1].Index; j-- {
			cards[j], cards[j-1] = cards[j-1], cards[j]
		}
	}
}

// Subscribe registers fn to run after every health change.
func (t *Tracker) Subscribe(fn func([]protocol.Card)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.subs = append(t.subs, fn)
}

// SetHealth records the health of the card with uuid, and why, and reports
// whether it changed; subscribers run only on a change.
func (t *Tracker) SetHealth(uuid string, healthy bool, reason string) bool {
	t.mu.Lock()
	if healthy {
		delete(t.reasons, uuid)
	} else {
		t.reasons[uuid] = reason
	}
	changed := false
	for i := range t.cards {
		if t.cards[i].UUID == uuid && t.cards[i].Healthy != healthy {
			t.cards[i].Healthy = healthy
			changed = true
		}
	}
	cards := append([]protocol.Card(nil), t.cards...)
	subs := append([]func([]protocol.Card){}, t.subs...)
	t.mu.Unlock()
	if changed {
		for _, fn := range subs {
			fn(cards)
		}
	}
	return changed
}

// ByUUID returns the card with uuid.
func (t *Tracker) ByUUID(uuid string) (protocol.Card, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.cards {
		if c.UUID == uuid {
			return c, true
		}
	}
	return protocol.Card{}, false
}

// Why says why the card with uuid is unhealthy ("" while it is healthy).
func (t *Tracker) Why(uuid string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reasons[uuid]
}

// Grantable refuses a card the tracker knows to be unhealthy, naming it and
// why; a card it does not know is for NVML to judge (nvml.Driver.Grantable).
func (t *Tracker) Grantable(uuid string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.cards {
		if c.UUID == uuid && !c.Healthy {
			return fmt.Errorf("%w: card %d (%s): %s", ErrUnhealthy, c.Index, c.UUID, t.reasons[uuid])
		}
	}
	return nil
}
