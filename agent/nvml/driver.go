// Package nvml discovers the node's cards through go-nvml and watches their
// health. Everything goes through nvml.Interface, so a simulated NVML (Fake,
// built from go-nvml's mock package) runs the same code.
package nvml

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ErrNoNVML is returned by Open when the NVML library is not installed.
var ErrNoNVML = errors.New("NVML library not found (no NVIDIA driver on this machine?); use --fake-cards to simulate cards")

// ErrNotGrantable is wrapped by Grantable's refusals.
var ErrNotGrantable = errors.New("card cannot be granted")

// Driver is an initialised NVML with the node's devices. Cards in MIG mode
// are not among its cards (Skipped): qGPU shares whole cards, and a card
// split into MIG devices is not one.
type Driver struct {
	lib     nvml.Interface
	devices []nvml.Device
	cards   []protocol.Card
	minors  map[string]int
	skipped []SkippedCard
}

// SkippedCard is a card the node has but the agent does not advertise.
type SkippedCard struct {
	Index  int
	UUID   string
	Reason string
}

// Open initialises NVML and discovers the cards. Close must be called.
func Open(lib nvml.Interface) (*Driver, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, ErrNoNVML
		}
		return nil, fmt.Errorf("initialising NVML: %s", ret.Error())
	}
	d := &Driver{lib: lib}
	if err := d.discover(); err != nil {
		lib.Shutdown()
		return nil, err
	}
	return d, nil
}

// Close shuts NVML down.
func (d *Driver) Close() error {
	if ret := d.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("shutting NVML down: %s", ret.Error())
	}
	return nil
}

// Cards returns the discovered cards, all healthy unless the health query at
// discovery failed. The slice is a copy.
func (d *Driver) Cards() []protocol.Card {
	return append([]protocol.Card(nil), d.cards...)
}

func (d *Driver) discover() error {
	n, ret := d.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("counting devices: %s", ret.Error())
	}
	if n > protocol.MaxCards {
		return fmt.Errorf("NVML reports %d devices, more than the %d supported", n, protocol.MaxCards)
	}
	for i := range n {
		dev, ret := d.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("device %d: getting handle: %s", i, ret.Error())
		}
		card, err := describe(dev, i)
		if err != nil {
			return err
		}
		if reason := migReason(dev); reason != "" {
			d.skipped = append(d.skipped, SkippedCard{Index: card.Index, UUID: card.UUID, Reason: reason})
			continue
		}
		minor, ret := dev.GetMinorNumber()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("device %d (%s): getting minor number: %s", i, card.UUID, ret.Error())
		}
		d.devices = append(d.devices, dev)
		d.cards = append(d.cards, card)
		if d.minors == nil {
			d.minors = map[string]int{}
		}
		d.minors[card.UUID] = minor
	}
	return nil
}

// Skipped returns the cards discovery left out, with why.
func (d *Driver) Skipped() []SkippedCard {
	return append([]SkippedCard(nil), d.skipped...)
}

// migReason says why a card's MIG mode keeps it from being shared whole, or
// "" when MIG is off or the card does not have it. A mode that cannot be
// read counts against the card: advertising a MIG card as whole would hand
// out memory that its MIG devices own.
func migReason(dev nvml.Device) string {
	current, pending, ret := dev.GetMigMode()
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED:
		return ""
	case ret != nvml.SUCCESS:
		return fmt.Sprintf("its MIG mode cannot be read (%s)", ret.Error())
	case current == nvml.DEVICE_MIG_ENABLE:
		return "MIG mode is enabled (the card is split into MIG devices, which qGPU does not share)"
	case pending == nvml.DEVICE_MIG_ENABLE:
		return "MIG mode is pending (enabled at the card's next reset)"
	}
	return ""
}

// Grantable says whether a grant may go to card uuid now: not to a card
// discovery left out, nor to one whose MIG mode has been turned on since,
// nor to a UUID that is not this node's.
func (d *Driver) Grantable(uuid string) error {
	for _, s := range d.skipped {
		if s.UUID == uuid {
			return fmt.Errorf("%w: card %d (%s) is not advertised: %s", ErrNotGrantable, s.Index, s.UUID, s.Reason)
		}
	}
	for i, c := range d.cards {
		if c.UUID == uuid {
			if reason := migReason(d.devices[i]); reason != "" {
				return fmt.Errorf("%w: card %d (%s): %s", ErrNotGrantable, c.Index, c.UUID, reason)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: card %s is not one of this node's cards", ErrNotGrantable, uuid)
}

// Minor returns the minor number of the card with this UUID: its device node
// is /dev/nvidia<minor>.
func (d *Driver) Minor(uuid string) (int, bool) {
	m, ok := d.minors[uuid]
	return m, ok
}

func describe(dev nvml.Device, i int) (protocol.Card, error) {
	index, ret := dev.GetIndex()
	if ret != nvml.SUCCESS {
		return protocol.Card{}, fmt.Errorf("device %d: getting index: %s", i, ret.Error())
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return protocol.Card{}, fmt.Errorf("device %d: getting UUID: %s", i, ret.Error())
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return protocol.Card{}, fmt.Errorf("device %d: getting name: %s", i, ret.Error())
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return protocol.Card{}, fmt.Errorf("device %d (%s): getting memory: %s", i, uuid, ret.Error())
	}
	return protocol.Card{
		Index: index, UUID: uuid, Model: name,
		MemoryMiB: int64(mem.Total >> 20), Healthy: true,
	}, nil
}

// Query runs the health query of card position i (an NVML call that fails on
// a lost or broken card).
func (d *Driver) Query(i int) error {
	if _, ret := d.devices[i].GetMemoryInfo(); ret != nvml.SUCCESS {
		return fmt.Errorf("card %d (%s): health query: %s", d.cards[i].Index, d.cards[i].UUID, ret.Error())
	}
	return nil
}
