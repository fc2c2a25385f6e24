// Package dra is the agent's Dynamic Resource Allocation mode
// (docs/dra.md): a kubelet plugin for driver gpu.qgpu.io that publishes
// one device per card with consumable capacity (memory, cores), prepares
// each allocated claim as a CDI spec of its own holding what the node's
// enforcement backend hands a container of that slice, checkpoints what it
// prepared, and withdraws its devices when the API server drops the
// consumable-capacity fields (the DRAConsumableCapacity feature gate off).
package dra

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// gib is one GiB in bytes: the memory capacity's unit of consumption.
const gib = 1 << 30

// Device is card c as a device of the node's ResourceSlice: shareable
// (allowMultipleAllocations), its memory in bytes consumed in whole GiB
// (1Gi up to the card's memory floored to GiB, 1Gi by default) and its 100
// cores consumed in whole percent (0 by default: online claims consume
// none), with its UUID, index, model and memory in GiB as attributes.
func Device(c protocol.Card) resourceapi.Device {
	memGiB := c.MemoryGiB()
	return resourceapi.Device{
		Name:                     protocol.DRADeviceName(c.Index),
		AllowMultipleAllocations: ptr.To(true),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			protocol.DRAAttributeUUID:      {StringValue: ptr.To(c.UUID)},
			protocol.DRAAttributeIndex:     {IntValue: ptr.To(int64(c.Index))},
			protocol.DRAAttributeModel:     {StringValue: ptr.To(c.Model)},
			protocol.DRAAttributeMemoryGiB: {IntValue: ptr.To(memGiB)},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			protocol.DRACapacityMemory: {
				Value: *resource.NewQuantity(c.MemoryMiB<<20, resource.BinarySI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default: ptr.To(resource.MustParse("1Gi")),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{
						Min:  ptr.To(resource.MustParse("1Gi")),
						Max:  resource.NewQuantity(memGiB*gib, resource.BinarySI),
						Step: ptr.To(resource.MustParse("1Gi")),
					},
				},
			},
			protocol.DRACapacityCores: {
				Value: *resource.NewQuantity(protocol.CoresPerCard, resource.DecimalSI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default: resource.NewQuantity(0, resource.DecimalSI),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{
						Min:  resource.NewQuantity(0, resource.DecimalSI),
						Max:  resource.NewQuantity(protocol.CoresPerCard, resource.DecimalSI),
						Step: resource.NewQuantity(1, resource.DecimalSI),
					},
				},
			},
		},
	}
}

// UnhealthyTaint is the taint of an unhealthy card's device: NoSchedule,
// so no new claim is allocated on it (upstream's allocator and
// qgpu-scheduler's both refuse a device with a taint the request does not
// tolerate), while the claims already there stay (not NoExecute: whether
// their pods go is the operator's call, docs/dra.md#card-health).
func UnhealthyTaint() resourceapi.DeviceTaint {
	return resourceapi.DeviceTaint{Key: protocol.DRATaintUnhealthy, Effect: resourceapi.DeviceTaintEffectNoSchedule}
}

// Shared is what the node publishes: one pool named after the node with
// one slice holding a device per card of at least 1 GiB (the agent's
// inventory leaves cards in MIG mode out already). An unhealthy card is
// published with UnhealthyTaint when tainted (the API server keeps device
// taints), so users see why it takes no claim, and left out otherwise.
func Shared(node string, cards []protocol.Card, tainted bool) resourceslice.DriverResources {
	devices := []resourceapi.Device{}
	for _, c := range cards {
		if c.MemoryGiB() < 1 || (!c.Healthy && !tainted) {
			continue
		}
		d := Device(c)
		if !c.Healthy {
			d.Taints = []resourceapi.DeviceTaint{UnhealthyTaint()}
		}
		devices = append(devices, d)
	}
	return pool(node, devices)
}

// Withdrawn is the node's pool without devices: the driver runs, but has
// nothing it can share (the API server dropped the consumable-capacity
// fields, and a device without them would be handed out whole to one claim
// while the agent gives it a 1 GiB slice).
func Withdrawn(node string) resourceslice.DriverResources {
	return pool(node, []resourceapi.Device{})
}

func pool(node string, devices []resourceapi.Device) resourceslice.DriverResources {
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		node: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}
}
