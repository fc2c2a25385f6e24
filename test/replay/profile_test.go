package main

import (
	"path/filepath"
	"testing"

	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

// --policy default is what the shipped profile configures.
func TestShippedProfileIsReadable(t *testing.T) {
	got, err := sim.ProfilePolicy(filepath.Join("..", "..", sim.DefaultProfile))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Valid() {
		t.Fatalf("shipped profile's policy %q", got)
	}
	pols, err := parsePolicies("default", filepath.Join("..", "..", sim.DefaultProfile), sim.Paper)
	if err != nil || len(pols) != 1 || pols[0] != got {
		t.Fatalf("--policy default: %v, %v; want [%s]", pols, err, got)
	}
}
