package protocol

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

// ClaimHold is what an allocated ResourceClaim holds of DRADriver's cards:
// the node (the pool is named after it), the class and one slice per
// result, each naming its card by index (an allocation carries no UUID).
type ClaimHold struct {
	Node   string
	Class  Class
	Slices []Slice
}

// HeldByClaim reads a claim's allocation of DRADriver's devices; false
// for a claim that is not allocated or holds none. A result without
// consumed capacity (an apiserver that dropped it: docs/dra.md) is left
// out, as the agent refuses to prepare it. The class is the one the
// allocation's config carries to the node, else the request's DeviceClass.
func HeldByClaim(c *resourceapi.ResourceClaim) (ClaimHold, bool) {
	if c == nil || c.Status.Allocation == nil {
		return ClaimHold{}, false
	}
	var out ClaimHold
	for _, r := range c.Status.Allocation.Devices.Results {
		index, ok := DRADeviceIndex(r.Device)
		if r.Driver != DRADriver || !ok || len(r.ConsumedCapacity) == 0 || (out.Node != "" && r.Pool != out.Node) {
			continue
		}
		mem := r.ConsumedCapacity[DRACapacityMemory]
		cores := r.ConsumedCapacity[DRACapacityCores]
		out.Node = r.Pool
		out.Class = claimClass(c, r.Request)
		out.Slices = append(out.Slices, Slice{Index: index, MemoryGiB: (mem.Value() + bytesPerGiB - 1) / bytesPerGiB, Cores: cores.Value()})
	}
	return out, len(out.Slices) > 0
}

const bytesPerGiB = 1 << 30

// claimClass is the class the allocation's config gives request, else the
// one its DeviceClass names, else general.
func claimClass(c *resourceapi.ResourceClaim, request string) Class {
	for _, cfg := range c.Status.Allocation.Devices.Config {
		if cfg.Opaque == nil || cfg.Opaque.Driver != DRADriver || (len(cfg.Requests) > 0 && !slices.Contains(cfg.Requests, request)) {
			continue
		}
		if cc, err := DecodeDRAClassConfig(cfg.Opaque.Parameters.Raw); err == nil {
			return cc.Class
		}
	}
	for _, r := range c.Spec.Devices.Requests {
		if r.Name == request && r.Exactly != nil {
			if class, ok := DRAClassOf(r.Exactly.DeviceClassName); ok {
				return class
			}
		}
	}
	return ClassGeneral
}
