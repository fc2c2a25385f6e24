package verify

import (
	"strings"
	"testing"
)

func mpsGood() []Line {
	return []Line{
		{Kind: "mount", Target: "/tmp/nvidia-mps", Root: "/mps/GPU-b/pipe", RO: true},
		{Kind: "mount", Target: "/dev/shm", Root: "/mps/GPU-b/shm"},
		{Kind: "file", Name: "/dev/shm/qgpu-mps-control-daemon", Value: "x\n"},
		{Kind: "writable", Name: "/dev/shm"},
		{Kind: "env", Name: "CUDA_MPS_PIPE_DIRECTORY", Value: "/tmp/nvidia-mps"},
		{Kind: "env", Name: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", Value: "0=4096M"},
	}
}

func TestMPS(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func([]Line) []Line
		want   string // a problem containing this; "" for none
	}{
		{"as set up", func(l []Line) []Line { return l }, ""},
		{"another card's pipe", func(l []Line) []Line { l[0].Root = "/mps/GPU-a/pipe"; return l }, "/tmp/nvidia-mps is /mps/GPU-a/pipe"},
		{"no pipe mount", func(l []Line) []Line { return l[1:] }, "no mount at /tmp/nvidia-mps"},
		{"the node-wide /dev/shm of before", func(l []Line) []Line { l[1].Root = "/mps/shm"; return l }, "/dev/shm is /mps/shm"},
		{"another card's /dev/shm", func(l []Line) []Line { l[1].Root = "/mps/GPU-a/shm"; return l }, "/dev/shm is /mps/GPU-a/shm"},
		{"the sandbox's own /dev/shm", func(l []Line) []Line { l[1].Root = "/"; return l[:2] }, "/dev/shm is /"},
		{"no daemon mark", func(l []Line) []Line { return append(l[:2], l[3:]...) }, "control daemon's mark"},
		{"shm read-only", func(l []Line) []Line { l[1].RO = true; return l }, "/dev/shm mounted read-only"},
		{"pipe read-write", func(l []Line) []Line { l[0].RO = false; return l }, "/tmp/nvidia-mps mounted read-write"},
		{"pod's own memory limit", func(l []Line) []Line { l[5].Value = "0=99999M"; return l }, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"},
		{"pod's own pipe directory", func(l []Line) []Line { l[4].Value = "/tmp/elsewhere"; return l }, "CUDA_MPS_PIPE_DIRECTORY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := MPS(pod(t), "main", tc.change(mpsGood()))
			got := strings.Join(problems, "; ")
			if tc.want == "" && len(problems) > 0 || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("problems %q, want one with %q", got, tc.want)
			}
		})
	}
}

func TestBackend(t *testing.T) {
	env := func(names ...string) []Line {
		var out []Line
		for _, n := range names {
			out = append(out, Line{Kind: "env", Name: n, Value: "x"})
		}
		return out
	}
	for _, tc := range []struct {
		lines []Line
		want  string
	}{
		{env("QGPU_MEMORY_GIB", "QGPU_CORES"), "env"},
		{env("CUDA_DEVICE_MEMORY_SHARED_CACHE", "GPU_CORE_UTILIZATION_POLICY"), "hami-core"},
		{env("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "mps"},
		// The label changed between the memory and the core Allocate.
		{env("CUDA_DEVICE_MEMORY_SHARED_CACHE", "QGPU_CORES"), "hami-core (memory) and env (cores)"},
		{env("QGPU_CORES", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "env (memory) and mps (cores)"},
	} {
		if got := Backend(tc.lines); got != tc.want {
			t.Errorf("Backend(%v) = %q, want %q", tc.lines, got, tc.want)
		}
	}
}

func TestMPSCeiling(t *testing.T) {
	for _, tc := range []struct {
		name, applied string
		want          string // a problem containing this; "" for none
	}{
		{"the slice", "memory_mib=4096 active_thread_percentage=30\n", ""},
		{"the whole card", "memory_mib=16384 active_thread_percentage=100\n", "is memory_mib=16384 active_thread_percentage=100, want the container's slice"},
		{"below the slice", "memory_mib=2048 active_thread_percentage=30\n", "want the container's slice memory_mib=4096"},
		{"none in force", "", "the MPS ceiling in force on GPU-b: memory_mib missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(MPSCeiling(pod(t), "main", tc.applied), "; ")
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("problems %q, want one with %q", got, tc.want)
			}
		})
	}
}
