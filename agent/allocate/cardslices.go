package allocate

import (
	"fmt"

	"github.com/qgpu-scheduler/qgpu/agent/cardbudget"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// cardSlices is enforce.Request.CardSlices: the slices the records of
// live pods hold on a card (the mps backend's ceiling is the largest of
// them), live as withinCapacity counts them: in the informer cache and not
// finished. A record outlives its pod until the reconciler's next pass,
// and a deleted whole-card pod's record would otherwise lift the ceiling
// to the whole card. When the cache cannot be read every record counts:
// a ceiling too high for a while, never one below a live container.
func (a *Allocator) cardSlices(uuid string) ([]protocol.Slice, error) {
	grants, err := a.Store.List()
	if err != nil {
		return nil, fmt.Errorf("reading the grants on card %s: %w", uuid, err)
	}
	pods, err := a.Pods.Cached()
	if err != nil {
		return slicesOn(grants, nil, uuid), nil
	}
	return slicesOn(grants, cardbudget.LivePods(pods), uuid), nil
}

// slicesOn lists the slices on card uuid of the grants whose pod is live
// (every grant when live is nil).
func slicesOn(grants []store.Grant, live map[string]bool, uuid string) []protocol.Slice {
	var out []protocol.Slice
	for _, g := range grants {
		if live != nil && !live[g.PodUID] {
			continue
		}
		for _, s := range g.Slices {
			if s.UUID == uuid {
				out = append(out, s)
			}
		}
	}
	return out
}
