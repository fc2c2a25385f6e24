package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func cardSpec(kind string, names []string, mounts ...string) *cdispec.Spec {
	s := &cdispec.Spec{Version: "0.6.0", Kind: kind, ContainerEdits: cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl"}, {Path: "/dev/nvidia-uvm"}},
		Hooks:       []*cdispec.Hook{{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache"}}},
	}}
	for _, m := range mounts {
		s.ContainerEdits.Mounts = append(s.ContainerEdits.Mounts, &cdispec.Mount{HostPath: m, ContainerPath: m})
	}
	for _, n := range names {
		s.Devices = append(s.Devices, cdispec.Device{Name: n, ContainerEdits: cdispec.ContainerEdits{
			DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidia0"}}}})
	}
	return s
}

func TestCompareSpecs(t *testing.T) {
	libs := []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04", "/usr/bin/nvidia-smi"}
	ours := cardSpec("qgpu.io/gpu", []string{"0", "GPU-a"}, libs...)
	for _, tc := range []struct {
		name    string
		theirs  *cdispec.Spec
		problem string
		note    string
	}{
		{"the same, with NVIDIA's all", cardSpec("nvidia.com/gpu", []string{"0", "GPU-a", "all"}, libs...), "", ""},
		{"index names only", cardSpec("nvidia.com/gpu", []string{"0", "all"}, libs...), "", ""},
		{"a library only NVIDIA mounts", cardSpec("nvidia.com/gpu", []string{"0"}, append(libs, "/usr/lib/libnvidia-ptxjitcompiler.so.1")...), "mounts only in NVIDIA's spec: /usr/lib/libnvidia-ptxjitcompiler.so.1", ""},
		{"another device node", func() *cdispec.Spec {
			s := cardSpec("nvidia.com/gpu", []string{"0"}, libs...)
			s.Devices[0].ContainerEdits.DeviceNodes[0].Path = "/dev/nvidia1"
			return s
		}(), `device "0"`, ""},
		{"a name the agent lacks", cardSpec("nvidia.com/gpu", []string{"0", "GPU-b"}, libs...), "", `"GPU-b"`},
		{"another hook program", func() *cdispec.Spec {
			s := cardSpec("nvidia.com/gpu", []string{"0"}, libs...)
			s.ContainerEdits.Hooks[0].Path = "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
			return s
		}(), "", "hook programs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, notes := compareSpecs(summarize(ours), summarize(tc.theirs))
			p, n := strings.Join(problems, "; "), strings.Join(notes, "; ")
			if (tc.problem == "") != (p == "") || !strings.Contains(p, tc.problem) {
				t.Errorf("problems %q, want %q", p, tc.problem)
			}
			if !strings.Contains(n, tc.note) {
				t.Errorf("notes %q, want %q", n, tc.note)
			}
		})
	}
}

func TestMissingOnHost(t *testing.T) {
	dir := t.TempDir()
	there := filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(there, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := &cdispec.Spec{Kind: "qgpu.io/gpu", ContainerEdits: cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{{Path: filepath.Join(dir, "nvidia0")}},
		Mounts:      []*cdispec.Mount{{HostPath: there, ContainerPath: "/usr/lib/libcuda.so.1"}},
	}}
	if got := missingOnHost(summarize(s)); len(got) != 1 || got[0] != filepath.Join(dir, "nvidia0") {
		t.Errorf("missing %v, want only the device node", got)
	}
}
