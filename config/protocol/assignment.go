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
	// 0 for online pods (they hold no core budget, docs/design.md#how-a-card-is-accounted).
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
	// uuidOf ties each card index to one UUID over the whole assignment.
	uuidOf := map[int]string{}
	indexOf := map[string]int{}
	oneCard := -1
	for i, c := range a.Containers {
		p := cp.Index(i)
		if c.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		if len(c.Slices) == 0 || len(c.Slices) > MaxCards {
			errs = append(errs, field.Invalid(p.Child("slices"), len(c.Slices), fmt.Sprintf("must hold 1 to %d slices", MaxCards)))
		}
		if len(c.Slices) > 1 && a.Class != ClassGeneral {
			errs = append(errs, field.Invalid(p.Child("slices"), len(c.Slices), fmt.Sprintf("a %s container uses one card", a.Class)))
		}
		for j, s := range c.Slices {
			sp := p.Child("slices").Index(j)
			errs = append(errs, s.validate(sp)...)
			errs = append(errs, a.validateSliceCard(sp, c.Slices[:j], s, uuidOf, indexOf, &oneCard)...)
		}
	}
	return errs
}

// validateSliceCard checks a slice against the others: one container never
// holds two slices of one card, an index names one UUID (and a UUID one index)
// throughout, and the containers of an online or offline pod share one card.
func (a *Assignment) validateSliceCard(p *field.Path, earlier []Slice, s Slice, uuidOf map[int]string, indexOf map[string]int, oneCard *int) field.ErrorList {
	var errs field.ErrorList
	for _, e := range earlier {
		if e.Index == s.Index {
			errs = append(errs, field.Duplicate(p.Child("index"), s.Index))
			break
		}
	}
	if u, ok := uuidOf[s.Index]; ok && u != s.UUID {
		errs = append(errs, field.Invalid(p.Child("uuid"), s.UUID, fmt.Sprintf("card %d is %q elsewhere in the assignment", s.Index, u)))
	} else if i, ok := indexOf[s.UUID]; ok && i != s.Index {
		errs = append(errs, field.Invalid(p.Child("index"), s.Index, fmt.Sprintf("card %q is index %d elsewhere in the assignment", s.UUID, i)))
	}
	uuidOf[s.Index], indexOf[s.UUID] = s.UUID, s.Index
	if a.Class == ClassOnline && s.Cores != 0 {
		errs = append(errs, field.Invalid(p.Child("cores"), s.Cores, "online pods hold no cores"))
	}
	if a.Class != ClassGeneral {
		if *oneCard < 0 {
			*oneCard = s.Index
		} else if *oneCard != s.Index {
			errs = append(errs, field.Invalid(p.Child("index"), s.Index, fmt.Sprintf("all containers of a %s pod share card %d", a.Class, *oneCard)))
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

// String renders the slices compactly for views, e.g. "main:0=5G/30 side:1=2G/10".
func (a *Assignment) String() string {
	var b []byte
	for i, c := range a.Containers {
		if i > 0 {
			b = append(b, ' ')
		}
		b = fmt.Appendf(b, "%s:", c.Name)
		for j, s := range c.Slices {
			if j > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, "%d=%dG/%d", s.Index, s.MemoryGiB, s.Cores)
		}
	}
	return string(b)
}
