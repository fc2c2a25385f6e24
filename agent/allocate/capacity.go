package allocate

import (
	"fmt"

	"github.com/qgpu-scheduler/qgpu/agent/cardbudget"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ErrOverCapacity is wrapped when a grant would take one of the node's cards
// past what it has: the agent's last line behind the scheduler's ledger.
var ErrOverCapacity = cardbudget.ErrOverCapacity

// checkCapacity refuses a grant that would take a card's granted memory,
// general cores or offline greedy share past the card's capacity, put a
// general slice on a card with online or offline ones or the reverse, or
// that names a card this node does not have, whatever the pod's assignment
// says (the rules are cardbudget's, which the DRA mode shares). It counts
// the grants held by the pods in live (the pods bound here that have not
// terminated); a grant of the same container and resource is being
// replaced and does not count.
func checkCapacity(cards []protocol.Card, grants []store.Grant, live map[string]bool, g store.Grant) error {
	budget := cardbudget.New(cards)
	for _, o := range grants {
		if o.Key() == g.Key() || !live[o.PodUID] {
			continue
		}
		budget.Hold(cardbudget.GrantUses(o)...)
	}
	if err := budget.Take(cardbudget.GrantUses(g)...); err != nil {
		return fmt.Errorf("%s: %w", g.Resource, err)
	}
	return nil
}
