package nvml

import "github.com/qgpu-scheduler/qgpu/agent/nvml/fakespec"

// FakeCard is one simulated card of a --fake-cards spec (fakespec.Card).
type FakeCard = fakespec.Card

// ErrFakeSpec is wrapped by every spec parsing error.
var ErrFakeSpec = fakespec.ErrSpec

// ParseFakeSpec reads a --fake-cards value (fakespec.Parse).
func ParseFakeSpec(spec string) ([]FakeCard, error) { return fakespec.Parse(spec) }

// KnownFakeModels lists the short model names a spec accepts, sorted.
func KnownFakeModels() []string { return fakespec.KnownModels() }
