package protocol

import (
	"encoding/json"
	"fmt"
	"time"
)

// AnnotationSuspended is written by the agent on an offline pod while its
// priority controller holds it frozen because an online pod on its card is
// busy (docs/design.md#online-and-offline-pods-at-run-time), and removed when
// the pod resumes. It is informational
// (kubectl qgpu shows it): written only on change and at most about once a
// second per pod, so a pod frozen and thawed many times a second shows its
// latest state a second late at worst, never a stale one for good.
const AnnotationSuspended = "qgpu.io/suspended"

// Suspension is the value of AnnotationSuspended.
type Suspension struct {
	// Since is when the controller froze the pod.
	Since time.Time `json:"since"`
}

// Encode returns the annotation value.
func (s Suspension) Encode() string {
	b, _ := json.Marshal(s) // a struct of one time.Time cannot fail
	return string(b)
}

// DecodeSuspension reads an AnnotationSuspended value.
func DecodeSuspension(value string) (Suspension, error) {
	var s Suspension
	if err := json.Unmarshal([]byte(value), &s); err != nil {
		return Suspension{}, fmt.Errorf("annotation %s: %w", AnnotationSuspended, err)
	}
	return s, nil
}
