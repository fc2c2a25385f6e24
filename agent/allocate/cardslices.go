package allocate

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// cardSlices is enforce.Request.CardSlices: the slices the records hold on
// a card (the mps backend's ceiling is the largest of them). Every record
// counts but those of pods the informer cache shows finished: a record
// outlives its pod only until the reconciler's next pass, and leaving out
// a live container's slice would lower the ceiling below it.
func (a *Allocator) cardSlices(uuid string) ([]protocol.Slice, error) {
	grants, err := a.Store.List()
	if err != nil {
		return nil, fmt.Errorf("reading the grants on card %s: %w", uuid, err)
	}
	finished := map[string]bool{}
	if pods, err := a.Pods.Cached(); err == nil {
		for _, p := range pods {
			if p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
				finished[string(p.UID)] = true
			}
		}
	}
	return slicesOn(grants, finished, uuid), nil
}

// slicesOn lists the slices on card uuid of the grants whose pod is not
// finished.
func slicesOn(grants []store.Grant, finished map[string]bool, uuid string) []protocol.Slice {
	var out []protocol.Slice
	for _, g := range grants {
		if finished[g.PodUID] {
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
