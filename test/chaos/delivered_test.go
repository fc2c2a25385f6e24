package main

import (
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
