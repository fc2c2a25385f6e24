package dra

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/qgpu-scheduler/qgpu/agent/cardbudget"
)

// withinCapacity refuses requests of claim that would take a card past
// its capacity (cardbudget's rules, the device plugins' too), counting
// every other claim the driver prepared and the device plugins' grants of
// the node's live pods: the scheduler's ledger should never let that
// happen, and if it does, the card is really oversubscribed. A refusal
// seen with the pods of the informer's cache is asked again with a fresh
// list (a pod the cache still shows may be gone). Called under d.mu,
// which also covers the checkpoint write that follows, so that two
// claims prepared at once are counted one after the other.
func (d *Driver) withinCapacity(ctx context.Context, claim *resourceapi.ResourceClaim, requests []Request) error {
	err := d.checkCapacity(ctx, claim, requests, false)
	if err != nil && d.cfg.DeviceGrants != nil {
		err = d.checkCapacity(ctx, claim, requests, true)
	}
	return err
}

func (d *Driver) checkCapacity(ctx context.Context, claim *resourceapi.ResourceClaim, requests []Request, fresh bool) error {
	budget := cardbudget.New(d.cfg.Cards())
	if d.cfg.DeviceGrants != nil {
		grants, err := d.cfg.DeviceGrants(ctx, fresh)
		if err != nil {
			return fmt.Errorf("reading the device plugins' grants to check the cards' capacity: %w", err)
		}
		for _, g := range grants {
			budget.Hold(cardbudget.GrantUses(g)...)
		}
	}
	for _, p := range d.prepared { // claim is not among them: prepare undid an earlier preparation
		for _, r := range p.Requests {
			budget.Hold(requestUses(p.Namespace, p.Name, r.Request)...)
		}
	}
	for _, r := range requests {
		if err := budget.Take(requestUses(claim.Namespace, claim.Name, r)...); err != nil {
			return fmt.Errorf("request %q: %w", r.Name, err)
		}
	}
	return nil
}

// requestUses are what a request of claim namespace/name holds: each of
// its slices whole.
func requestUses(namespace, name string, r Request) []cardbudget.Use {
	out := make([]cardbudget.Use, 0, len(r.Slices))
	for _, s := range r.Slices {
		out = append(out, cardbudget.SliceUse("claim "+namespace+"/"+name, r.Class, s))
	}
	return out
}
