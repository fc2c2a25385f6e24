package dra

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ErrCapacityNotConsumed: an allocation result of this driver carries no
// consumedCapacity. The API server keeps it only with the
// DRAConsumableCapacity feature gate on (qgpu-scheduler, which writes it,
// then refuses to bind: docs/dra.md); without it the claim would hold the
// whole card while the agent hands it a slice.
var ErrCapacityNotConsumed = errors.New("allocation result has no consumedCapacity (is the DRAConsumableCapacity feature gate on in kube-apiserver? docs/dra.md)")

// Request is one request of a claim as the agent prepares it: the class
// from its DeviceClass, and one slice per card the scheduler allocated to
// it (a general request for whole cards gets several).
type Request struct {
	// Name is the request's name as the allocation results give it
	// (<request> or <request>/<subrequest>).
	Name    string           `json:"name"`
	Class   protocol.Class   `json:"class"`
	Devices []string         `json:"devices"` // the devices of Slices, in order
	Slices  []protocol.Slice `json:"slices"`
}

// Requests reads the allocation of claim: every result of this driver
// becomes a slice of its request, on the card its device names, of the
// memory and cores it consumed, in the class its DeviceClass's
// configuration names. cardOf looks a card index up on this node. The
// error names the field and the value that is wrong.
func Requests(claim *resourceapi.ResourceClaim, node string, cardOf func(index int) (protocol.Card, bool)) ([]Request, error) {
	if claim.Status.Allocation == nil {
		return nil, errors.New("status.allocation: not allocated")
	}
	alloc := claim.Status.Allocation.Devices
	if err := checkClaimConfig(alloc.Config); err != nil {
		return nil, err
	}
	var out []Request
	for i, r := range alloc.Results {
		if r.Driver != protocol.DRADriver {
			continue
		}
		field := fmt.Sprintf("status.allocation.devices.results[%d]", i)
		s, err := resultSlice(r, node, cardOf)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		class, err := classOf(alloc.Config, r.Request)
		if err != nil {
			return nil, fmt.Errorf("%s (request %q): %w", field, r.Request, err)
		}
		if err := checkClass(class, s); err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		k := slices.IndexFunc(out, func(q Request) bool { return q.Name == r.Request })
		if k < 0 {
			out = append(out, Request{Name: r.Request, Class: class})
			k = len(out) - 1
		}
		out[k].Devices = append(out[k].Devices, r.Device)
		out[k].Slices = append(out[k].Slices, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("status.allocation.devices.results: no result of driver %s", protocol.DRADriver)
	}
	return out, nil
}

// resultSlice is the card and the capacity one result consumed.
func resultSlice(r resourceapi.DeviceRequestAllocationResult, node string, cardOf func(int) (protocol.Card, bool)) (protocol.Slice, error) {
	if r.Pool != node {
		return protocol.Slice{}, fmt.Errorf("pool: %q is not this node's pool %q", r.Pool, node)
	}
	if r.AdminAccess != nil && *r.AdminAccess {
		return protocol.Slice{}, errors.New("adminAccess: true is not supported by this driver")
	}
	index, ok := protocol.DRADeviceIndex(r.Device)
	if !ok {
		return protocol.Slice{}, fmt.Errorf("device: unsupported value %q: must be gpu-<index>", r.Device)
	}
	card, ok := cardOf(index)
	if !ok {
		return protocol.Slice{}, fmt.Errorf("device: %q: this node has no card %d", r.Device, index)
	}
	if r.ConsumedCapacity == nil {
		return protocol.Slice{}, fmt.Errorf("consumedCapacity: %w", ErrCapacityNotConsumed)
	}
	mem, ok := r.ConsumedCapacity[protocol.DRACapacityMemory]
	if !ok {
		return protocol.Slice{}, fmt.Errorf("consumedCapacity.%s: %w", protocol.DRACapacityMemory, ErrCapacityNotConsumed)
	}
	cores, ok := r.ConsumedCapacity[protocol.DRACapacityCores]
	if !ok {
		return protocol.Slice{}, fmt.Errorf("consumedCapacity.%s: %w", protocol.DRACapacityCores, ErrCapacityNotConsumed)
	}
	bytes, ok := mem.AsInt64()
	if !ok || bytes < gib || bytes%gib != 0 || bytes/gib > card.MemoryGiB() {
		return protocol.Slice{}, fmt.Errorf("consumedCapacity.%s: invalid value %s: must be whole GiB from 1Gi to the card's %dGi",
			protocol.DRACapacityMemory, mem.String(), card.MemoryGiB())
	}
	c, ok := cores.AsInt64()
	if !ok || c < 0 || c > protocol.CoresPerCard {
		return protocol.Slice{}, fmt.Errorf("consumedCapacity.%s: invalid value %s: must be an integer from 0 to %d",
			protocol.DRACapacityCores, cores.String(), protocol.CoresPerCard)
	}
	return protocol.Slice{Index: card.Index, UUID: card.UUID, MemoryGiB: bytes / gib, Cores: c}, nil
}

// checkClass applies the class's rule for cores (docs/design.md#what-a-pod-asks-for):
// general and offline slices hold 1 to 100, online ones none.
func checkClass(c protocol.Class, s protocol.Slice) error {
	switch {
	case c == protocol.ClassOnline && s.Cores != 0:
		return fmt.Errorf("consumedCapacity.%s: invalid value %d: an online claim consumes no cores", protocol.DRACapacityCores, s.Cores)
	case c != protocol.ClassOnline && s.Cores < 1:
		return fmt.Errorf("consumedCapacity.%s: invalid value %d: a %s claim consumes 1 to %d", protocol.DRACapacityCores, s.Cores, c, protocol.CoresPerCard)
	}
	return nil
}

// checkClaimConfig refuses this driver's configuration written into the
// claim: the class comes from the DeviceClass, which users cannot edit; a
// claim naming its own class could turn a general slice online.
func checkClaimConfig(configs []resourceapi.DeviceAllocationConfiguration) error {
	for j, c := range configs {
		if c.Opaque != nil && c.Opaque.Driver == protocol.DRADriver && c.Source != resourceapi.AllocationConfigSourceClass {
			return fmt.Errorf("status.allocation.devices.config[%d].source: %q: a claim may not configure driver %s (the class comes from its DeviceClass)",
				j, c.Source, protocol.DRADriver)
		}
	}
	return nil
}

// classOf is the class of the DeviceClass configuration that applies to
// request: exactly one class must.
func classOf(configs []resourceapi.DeviceAllocationConfiguration, request string) (protocol.Class, error) {
	var class protocol.Class
	for j, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != protocol.DRADriver || !appliesTo(c.Requests, request) {
			continue
		}
		cfg, err := protocol.DecodeDRAClassConfig(c.Opaque.Parameters.Raw)
		if err != nil {
			return "", fmt.Errorf("status.allocation.devices.config[%d].opaque.parameters: %w", j, err)
		}
		if class != "" && class != cfg.Class {
			return "", fmt.Errorf("status.allocation.devices.config[%d].opaque.parameters: class %q, another configuration says %q", j, cfg.Class, class)
		}
		class = cfg.Class
	}
	if class == "" {
		return "", fmt.Errorf("status.allocation.devices.config: no %s %s of driver %s from the DeviceClass (is the claim's DeviceClass one of %s?)",
			protocol.DRAConfigAPIVersion, protocol.DRAConfigKind, protocol.DRADriver, strings.Join(deviceClasses(), ", "))
	}
	return class, nil
}

// appliesTo: a configuration names requests, or none for all of them; a
// subrequest's result is configured by its parent request's name too.
func appliesTo(requests []string, request string) bool {
	if len(requests) == 0 {
		return true
	}
	parent, _, _ := strings.Cut(request, "/")
	return slices.Contains(requests, request) || slices.Contains(requests, parent)
}

func deviceClasses() []string {
	var out []string
	for _, c := range []protocol.Class{protocol.ClassGeneral, protocol.ClassOnline, protocol.ClassOffline} {
		out = append(out, protocol.DRADeviceClass(c))
	}
	return out
}
