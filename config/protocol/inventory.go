package protocol

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// InventoryVersion is the only inventory format this build reads and writes.
const InventoryVersion = "qgpu.io/v1"

// MaxCards bounds the cards of one node (the largest servers have 16).
const MaxCards = 64

// Inventory is what the agent publishes on its Node (annotation
// AnnotationInventory): the node's cards as NVML sees them.
type Inventory struct {
	Version string `json:"version"`
	Cards   []Card `json:"cards"`
}

// Card is one physical GPU.
type Card struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid"`
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"`
	Healthy   bool   `json:"healthy"`
}

// MemoryGiB is the card's capacity in the unit pods request (whole GiB, rounded down).
func (c Card) MemoryGiB() int64 { return c.MemoryMiB / GiB }

// DecodeInventory strictly decodes and validates an inventory annotation.
func DecodeInventory(data []byte) (*Inventory, error) {
	var inv Inventory
	if err := decodeStrict(data, &inv); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationInventory, err)
	}
	if errs := inv.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationInventory, errs.ToAggregate())
	}
	return &inv, nil
}

// Encode returns the annotation value; it validates first so that an agent
// never publishes what a scheduler would reject.
func (inv *Inventory) Encode() (string, error) {
	if errs := inv.Validate(); len(errs) > 0 {
		return "", errs.ToAggregate()
	}
	b, err := json.Marshal(inv)
	return string(b), err
}

// Validate checks the version, and that indexes and UUIDs are unique and sane.
func (inv *Inventory) Validate() field.ErrorList {
	var errs field.ErrorList
	if inv.Version != InventoryVersion {
		errs = append(errs, field.NotSupported(field.NewPath("version"), inv.Version, []string{InventoryVersion}))
	}
	cardsPath := field.NewPath("cards")
	if len(inv.Cards) > MaxCards {
		errs = append(errs, field.TooMany(cardsPath, len(inv.Cards), MaxCards))
		return errs
	}
	seenIndex := map[int]bool{}
	seenUUID := map[string]bool{}
	for i, c := range inv.Cards {
		p := cardsPath.Index(i)
		if c.Index < 0 || c.Index >= MaxCards {
			errs = append(errs, field.Invalid(p.Child("index"), c.Index, fmt.Sprintf("must be in [0, %d)", MaxCards)))
		} else if seenIndex[c.Index] {
			errs = append(errs, field.Duplicate(p.Child("index"), c.Index))
		}
		seenIndex[c.Index] = true
		if c.UUID == "" || len(c.UUID) > 128 {
			errs = append(errs, field.Invalid(p.Child("uuid"), c.UUID, "must be 1 to 128 characters"))
		} else if seenUUID[c.UUID] {
			errs = append(errs, field.Duplicate(p.Child("uuid"), c.UUID))
		}
		seenUUID[c.UUID] = true
		if len(c.Model) > 128 {
			errs = append(errs, field.TooLong(p.Child("model"), c.Model, 128))
		}
		// 1 GiB to 16 TiB: below one GiB a card cannot hold a single slice.
		if c.MemoryMiB < GiB || c.MemoryMiB > 16<<20 {
			errs = append(errs, field.Invalid(p.Child("memoryMiB"), c.MemoryMiB, "must be between 1024 and 16777216"))
		}
	}
	return errs
}
