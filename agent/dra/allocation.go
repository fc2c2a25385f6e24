package dra

import (
	"bytes"
	"encoding/json"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Allocation is the part of a claim's allocation the driver prepared from,
// as the checkpoint records it: the results of this driver (card, consumed
// capacity, share ID) and its configuration (the class). A claim asked for
// again under the same UID with another allocation is prepared again
// (docs/dra.md#checkpoint-restart-and-clean-up).
type Allocation struct {
	Results []resourceapi.DeviceRequestAllocationResult `json:"results"`
	Config  []AllocationConfig                          `json:"config,omitempty"`
}

// AllocationConfig is a configuration of this driver in an allocation,
// its opaque parameters compacted: the checkpoint is written indented,
// which would change the spaces of a raw JSON value and so its bytes.
type AllocationConfig struct {
	Source     resourceapi.AllocationConfigSource `json:"source"`
	Requests   []string                           `json:"requests,omitempty"`
	Parameters string                             `json:"parameters"`
}

// allocationOf is claim's allocation of this driver; nil when the claim is
// not allocated.
func allocationOf(claim *resourceapi.ResourceClaim) *Allocation {
	if claim.Status.Allocation == nil {
		return nil
	}
	alloc := claim.Status.Allocation.Devices
	out := &Allocation{}
	for _, r := range alloc.Results {
		if r.Driver == protocol.DRADriver {
			out.Results = append(out.Results, *r.DeepCopy())
		}
	}
	for _, c := range alloc.Config {
		if c.Opaque == nil || c.Opaque.Driver != protocol.DRADriver {
			continue
		}
		params := c.Opaque.Parameters.Raw
		var compact bytes.Buffer
		if json.Compact(&compact, params) == nil {
			params = compact.Bytes()
		}
		out.Config = append(out.Config, AllocationConfig{Source: c.Source, Requests: c.Requests, Parameters: string(params)})
	}
	return out
}

// preparedFrom reports whether p was prepared from claim's allocation as
// it is now. An entry of a version-1 checkpoint recorded no allocation:
// it is compared by what it was prepared as (the cards, the memory and
// cores on each, the class).
func (d *Driver) preparedFrom(p Prepared, claim *resourceapi.ResourceClaim) bool {
	if p.Allocation != nil {
		now := allocationOf(claim)
		return now != nil && equality.Semantic.DeepEqual(*p.Allocation, *now)
	}
	now, err := Requests(claim, d.node, d.cardOf)
	if err != nil || len(now) != len(p.Requests) {
		return false
	}
	for i, r := range p.Requests {
		if !equality.Semantic.DeepEqual(r.Request, now[i]) {
			return false
		}
	}
	return true
}
