package allocate

import (
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ErrOverCapacity is wrapped when a grant would take one of the node's cards
// past what it has: the agent's last line behind the scheduler's ledger.
var ErrOverCapacity = errors.New("grant would oversubscribe a card")

// checkCapacity refuses a grant that would take a card's granted memory,
// general cores or offline greedy share past the card's capacity, or that
// names a card this node does not have, whatever the pod's assignment says:
// the scheduler's ledger should never let that happen, and if it does (a bug,
// an assignment written past the admission policy), the card's memory is
// really oversubscribed. It counts the grants of the same resource held by
// the pods in live (the pods bound here that have not terminated); a grant of
// the same container and resource is being replaced and does not count.
func checkCapacity(cards []protocol.Card, grants []store.Grant, live map[string]bool, g store.Grant) error {
	held := map[string]int64{}
	holders := map[string][]string{}
	for _, o := range grants {
		if o.Resource != g.Resource || o.Key() == g.Key() || !live[o.PodUID] {
			continue
		}
		for _, s := range o.Slices {
			if n := amountOn(o.Resource, o.Class, s); n > 0 {
				held[s.UUID] += n
				holders[s.UUID] = append(holders[s.UUID], fmt.Sprintf("%s/%s/%s %d", o.Namespace, o.Name, o.Container, n))
			}
		}
	}
	for _, s := range g.Slices {
		c, ok := cardByUUID(cards, s.UUID)
		if !ok {
			return fmt.Errorf("%w: %s names card %d (%s), which this node does not have", ErrOverCapacity, g.Resource, s.Index, s.UUID)
		}
		want := amountOn(g.Resource, g.Class, s)
		capacity, unit := int64(protocol.CoresPerCard), "cores"
		if g.Resource == protocol.ResourceMemory {
			capacity, unit = c.MemoryGiB(), "GiB"
		}
		if held[s.UUID]+want > capacity {
			return fmt.Errorf("%w: %s on card %d (%s): %d %s already granted + %d %s asked > the card's %d %s (held by %s)",
				ErrOverCapacity, g.Resource, c.Index, c.UUID, held[s.UUID], unit, want, unit, capacity, unit, strings.Join(holders[s.UUID], ", "))
		}
		held[s.UUID] += want
	}
	return nil
}

// amountOn is what a slice of a grant of resource takes on its card.
func amountOn(resource string, class protocol.Class, s protocol.Slice) int64 {
	switch {
	case resource == protocol.ResourceMemory:
		return s.MemoryGiB
	case resource == protocol.ResourceCore && class == protocol.ClassGeneral,
		resource == protocol.ResourceCoreGreedy && class == protocol.ClassOffline:
		return s.Cores
	}
	return 0
}

func cardByUUID(cards []protocol.Card, uuid string) (protocol.Card, bool) {
	for _, c := range cards {
		if c.UUID == uuid {
			return c, true
		}
	}
	return protocol.Card{}, false
}

// livePods are the UIDs of pods that have not terminated.
func livePods(pods []*v1.Pod) map[string]bool {
	out := make(map[string]bool, len(pods))
	for _, p := range pods {
		if p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
			out[string(p.UID)] = true
		}
	}
	return out
}
