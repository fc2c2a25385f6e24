package protocol

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// AssignmentVersion is the only assignment format this build reads and writes.
const AssignmentVersion = "qgpu.io/v1"

// Assignment is the scheduler's decision for one pod (annotation
// AnnotationAssignment), and, with the same shape, the agent's record of what it
// really granted (annotation AnnotationGrant).
//
// PodUID binds the record to the pod it was made for: a user cannot know the
// UID of a pod before creating it, so an assignment forged into a new pod never
// matches and is ignored.
type Assignment struct {
	Version    string                `json:"version"`
	PodUID     string                `json:"podUID"`
	Node       string                `json:"node"`
	Class      Class                 `json:"class"`
	Containers []ContainerAssignment `json:"containers"`
}

// ContainerAssignment is what one container holds: one slice, or k whole cards.
type ContainerAssignment struct {
	Name   string  `json:"name"`
	Slices []Slice `json:"slices"`
}

// Slice is a share of one card.
type Slice struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid"`
	MemoryGiB int64  `json:"memoryGiB"`
	// Cores is qgpu-core for general pods, qgpu-core-greedy for offline pods and
	// 0 for online pods (they hold no core budget, DESIGN §3).
	Cores int64 `json:"cores"`
}

// DecodeAssignment strictly decodes and validates an assignment or grant annotation.
func DecodeAssignment(data []byte) (*Assignment, error) {
	var a Assignment
	if err := decodeStrict(data, &a); err != nil {
		return nil, err
	}
	if errs := a.Validate(); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return &a, nil
}

// Encode returns the annotation value.
func (a *Assignment) Encode() (string, error) {
	if errs := a.Validate(); len(errs) > 0 {
		return "", errs.ToAggregate()
	}
	b, err := json.Marshal(a)
	return string(b), err
}

// Validate checks the shape; whether the slices fit a card is the ledger's job.
func (a *Assignment) Validate() field.ErrorList {
	var errs field.ErrorList
	if a.Version != AssignmentVersion {
		errs = append(errs, field.NotSupported(field.NewPath("version"), a.Version, []string{AssignmentVersion}))
	}
	if a.PodUID == "" {
		errs = append(errs, field.Required(field.NewPath("podUID"), ""))
	}
	if a.Node == "" {
		errs = append(errs, field.Required(field.NewPath("node"), ""))
	}
	switch a.Class {
	case ClassGeneral, ClassOnline, ClassOffline:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("class"), a.Class, []Class{ClassGeneral, ClassOnline, ClassOffline}))
	}
	cp := field.NewPath("containers")
	if len(a.Containers) == 0 || len(a.Containers) > 64 {
		errs = append(errs, field.Invalid(cp, len(a.Containers), "must hold 1 to 64 containers"))
	}
	for i, c := range a.Containers {
		p := cp.Index(i)
		if c.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		if len(c.Slices) == 0 || len(c.Slices) > MaxCards {
			errs = append(errs, field.Invalid(p.Child("slices"), len(c.Slices), fmt.Sprintf("must hold 1 to %d slices", MaxCards)))
		}
		for j, s := range c.Slices {
			errs = append(errs, s.validate(p.Child("slices").Index(j))...)
		}
	}
	return errs
}

func (s Slice) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Index < 0 || s.Index >= MaxCards {
		errs = append(errs, field.Invalid(p.Child("index"), s.Index, fmt.Sprintf("must be in [0, %d)", MaxCards)))
	}
	if s.UUID == "" {
		errs = append(errs, field.Required(p.Child("uuid"), ""))
	}
	if s.MemoryGiB < 1 || s.MemoryGiB > 16<<10 {
		errs = append(errs, field.Invalid(p.Child("memoryGiB"), s.MemoryGiB, "must be between 1 and 16384"))
	}
	if s.Cores < 0 || s.Cores > CoresPerCard {
		errs = append(errs, field.Invalid(p.Child("cores"), s.Cores, "must be between 0 and 100"))
	}
	return errs
}

// Total returns the memory and cores the container holds over all its slices.
func (c ContainerAssignment) Total() (memoryGiB, cores int64) {
	for _, s := range c.Slices {
		memoryGiB += s.MemoryGiB
		cores += s.Cores
	}
	return memoryGiB, cores
}
