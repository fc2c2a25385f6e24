package main

import (
	"errors"
	"testing"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func TestDeliveredMatches(t *testing.T) {
	general := protocol.ContainerAssignment{Name: "c", Slices: []protocol.Slice{{Index: 1, UUID: "GPU-b", MemoryGiB: 3, Cores: 20}}}
	whole := protocol.ContainerAssignment{Name: "c", Slices: []protocol.Slice{
		{Index: 0, UUID: "GPU-a", MemoryGiB: 14, Cores: 100}, {Index: 1, UUID: "GPU-b", MemoryGiB: 14, Cores: 100}}}
	online := protocol.ContainerAssignment{Name: "c", Slices: []protocol.Slice{{Index: 0, UUID: "GPU-a", MemoryGiB: 2}}}
	tests := []struct {
		name  string
		env   map[string]string
		grant protocol.ContainerAssignment
		want  bool
	}{
		{"as granted", map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-b", "QGPU_MEMORY_GIB": "3", "QGPU_CORES": "20"}, general, true},
		{"another card", map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-a", "QGPU_MEMORY_GIB": "3", "QGPU_CORES": "20"}, general, false},
		{"more memory", map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-b", "QGPU_MEMORY_GIB": "4", "QGPU_CORES": "20"}, general, false},
		{"other cores", map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-b", "QGPU_MEMORY_GIB": "3", "QGPU_CORES": "30"}, general, false},
		{"whole cards in any order", map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-b,GPU-a", "QGPU_MEMORY_GIB": "28", "QGPU_CORES": "200"}, whole, true},
		{"online: no cores variable", map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-a", "QGPU_MEMORY_GIB": "2"}, online, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseDelivered(tc.env).matches(tc.grant); got != tc.want {
				t.Errorf("%v matches %v: %v, want %v", tc.env, tc.grant, got, tc.want)
			}
		})
	}
}

// TestNothingDelivered: a running container the scheduler assigned a slice
// fails the check when its record cannot be read or names no card (it was
// skipped before, so an empty record passed); one assigned nothing is left
// alone.
func TestNothingDelivered(t *testing.T) {
	a := &protocol.Assignment{Containers: []protocol.ContainerAssignment{{Name: "gpu", Slices: []protocol.Slice{{Index: 0, UUID: "GPU-a", MemoryGiB: 2, Cores: 10}}}}}
	tests := []struct {
		name      string
		container string
		env       map[string]string
		err       error
		fails     bool
	}{
		{"given its card", "gpu", map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-a"}, nil, false},
		{"record unreadable", "gpu", nil, errors.New("no such file"), true},
		{"given no card", "gpu", map[string]string{"QGPU_MEMORY_GIB": "2"}, nil, true},
		{"a container assigned nothing", "sidecar", nil, errors.New("no such file"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := nothingDelivered(a, tc.container, tc.env, tc.err); (got != "") != tc.fails {
				t.Errorf("nothingDelivered = %q, want a failure: %v", got, tc.fails)
			}
		})
	}
	if got := nothingDelivered(nil, "gpu", nil, errors.New("x")); got != "" {
		t.Errorf("a pod without an assignment: %q", got)
	}
}

// TestReportFailsEmpty: a check that judged nothing fails.
func TestReportFailsEmpty(t *testing.T) {
	if n := report("empty", 0, nil); n != 1 {
		t.Errorf("report of nothing checked: %d failures, want 1", n)
	}
	if n := report("full", 3, nil); n != 0 {
		t.Errorf("report of 3 clean cases: %d failures, want 0", n)
	}
}
