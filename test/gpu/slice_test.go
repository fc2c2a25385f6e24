package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
)

// attack is what run.sh's pods set themselves (ATTACK).
var attack = []string{"CUDA_DEVICE_MEMORY_LIMIT_0=80g", "CUDA_DEVICE_MEMORY_LIMIT=80g", "CUDA_DEVICE_SM_LIMIT_0=100",
	"CUDA_DEVICE_SM_LIMIT=100", "GPU_CORE_UTILIZATION_POLICY=disable", "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/mine.cache"}

func sliceNode(t *testing.T) sliceOptions {
	t.Helper()
	dir := t.TempDir()
	lib := filepath.Join(dir, "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "libvgpu.so"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return sliceOptions{uuid: "GPU-5b3f0d6e", memoryGiB: 4, cores: 30, class: "general", policy: "fixed-share",
		root: filepath.Join(dir, "w"), libDir: lib, lockDir: filepath.Join(dir, "lock"), podUID: "gpucheck-t",
		container: "main", delivery: "cdi-cri"}
}

// limits is what HAMi-core would read for ordinal i: the per-card form
// when set and not 0, else the plain one (multiprocess_memory_limit.c).
func limits(env map[string]string, i int) (mem, sm string) {
	pick := func(name string) string {
		if v := env[name+"_"+strconv.Itoa(i)]; v != "" && v != "0" {
			return v
		}
		return env[name]
	}
	return pick("CUDA_DEVICE_MEMORY_LIMIT"), pick("CUDA_DEVICE_SM_LIMIT")
}

func TestAllocateSlice(t *testing.T) {
	for _, tc := range []struct {
		name                string
		delivery            string
		podEnv, drop        []string
		class               string
		wantMem, wantSM     string
		wantPolicy, wantReg string
	}{
		{"the slice", "cdi-cri", nil, nil, "general", "4096m", "30", "force", "/tmp/vgpu/cudevshr.cache"},
		{"a pod's own limits lose under CDI", "cdi-cri", attack, nil, "general", "4096m", "30", "force", "/tmp/vgpu/cudevshr.cache"},
		{"a pod's own limits win under envvar", "envvar", attack, nil, "general", "80g", "100", "disable", "/tmp/mine.cache"},
		{"an older agent's plain SM limit loses to the pod's per-card one", "cdi-cri", []string{"CUDA_DEVICE_SM_LIMIT_0=100"}, []string{"CUDA_DEVICE_SM_LIMIT_*"}, "general", "4096m", "100", "force", "/tmp/vgpu/cudevshr.cache"},
		{"offline: its greedy cores", "cdi-cri", nil, nil, "offline", "4096m", "30", "force", "/tmp/vgpu/cudevshr.cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := sliceNode(t)
			o.delivery, o.podEnv, o.drop, o.class = tc.delivery, tc.podEnv, tc.drop, tc.class
			v, err := allocateSlice(o)
			if err != nil {
				t.Fatal(err)
			}
			mem, sm := limits(v.env, 0)
			if mem != tc.wantMem || sm != tc.wantSM || v.env["GPU_CORE_UTILIZATION_POLICY"] != tc.wantPolicy || v.env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] != tc.wantReg {
				t.Errorf("ordinal 0: memory %q SM %q policy %q region %q; want %q %q %q %q", mem, sm, v.env["GPU_CORE_UTILIZATION_POLICY"],
					v.env["CUDA_DEVICE_MEMORY_SHARED_CACHE"], tc.wantMem, tc.wantSM, tc.wantPolicy, tc.wantReg)
			}
			if tc.delivery == "cdi-cri" && len(tc.drop) == 0 {
				for i := 1; i < 16; i++ {
					if m, s := limits(v.env, i); m != tc.wantMem || s != tc.wantSM {
						t.Errorf("ordinal %d: memory %q SM %q", i, m, s)
					}
				}
			}
			region := filepath.Join(o.root, "regions", "gpucheck-t_main")
			want := []viewMount{
				{dest: enforce.HAMiContainerOverrideEnv, src: filepath.Join(o.root, "regions", enforce.HAMiOverrideEnvName), readOnly: true},
				{dest: enforce.HAMiContainerPreload, src: filepath.Join(o.root, "regions", enforce.HAMiPreloadName), readOnly: true},
				{dest: enforce.HAMiContainerCacheDir, src: region},
				{dest: enforce.HAMiContainerLockDir, src: filepath.Join(o.lockDir, o.uuid)}, // one lock directory per card
				{dest: enforce.HAMiContainerLib, src: filepath.Join(o.libDir, "libvgpu.so"), readOnly: true},
			}
			byDest := func(ms []viewMount) map[string]viewMount {
				out := map[string]viewMount{}
				for _, m := range ms {
					out[m.dest] = m
				}
				return out
			}
			if diff := cmp.Diff(byDest(want), byDest(v.mounts), cmp.AllowUnexported(viewMount{})); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
			if fi, err := os.Stat(region); err != nil || fi.Mode().Perm() != 0o777 {
				t.Errorf("region directory %s: %v %v", region, fi, err)
			}
		})
	}
}

func TestWriteView(t *testing.T) {
	v := containerView{
		env: map[string]string{"CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/vgpu/cudevshr.cache", "A": "1"},
		mounts: []viewMount{
			{dest: "/tmp/vgpu", src: "/w/regions/p_main"},
			{dest: "/usr/local/vgpu/libvgpu.so", src: "/w/lib/libvgpu.so", readOnly: true},
		},
	}
	var b bytes.Buffer
	if err := writeView(&b, v, false); err != nil {
		t.Fatal(err)
	}
	want := "env A=1\nenv CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/vgpu/cudevshr.cache\nmount /tmp/vgpu /w/regions/p_main rw\nmount /usr/local/vgpu/libvgpu.so /w/lib/libvgpu.so ro\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("mounts view (-want +got):\n%s", diff)
	}
	b.Reset()
	if err := writeView(&b, v, true); err != nil {
		t.Fatal(err)
	}
	want = "env A=1\nenv CUDA_DEVICE_MEMORY_SHARED_CACHE=/w/regions/p_main/cudevshr.cache\nenv LD_PRELOAD=/w/lib/libvgpu.so\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("preload view (-want +got):\n%s", diff)
	}
	v.env["B"] = "two words"
	if err := writeView(&b, v, false); err == nil || !strings.Contains(err.Error(), "white space") {
		t.Errorf("a value with a space: %v", err)
	}
	if err := writeView(&b, containerView{env: map[string]string{}}, true); err == nil {
		t.Error("preload without the library's mount succeeded")
	}
}

func TestHostPath(t *testing.T) {
	ms := []viewMount{{dest: "/tmp/vgpu", src: "/h/r"}, {dest: "/tmp/vgpu/deeper", src: "/h/d"}}
	for in, want := range map[string]string{
		"/tmp/vgpu": "/h/r", "/tmp/vgpu/x": "/h/r/x", "/tmp/vgpu/deeper/y": "/h/d/y", "/tmp/vgpulock": "/tmp/vgpulock", "force": "force",
	} {
		if got := hostPath(ms, in); got != want {
			t.Errorf("hostPath(%q) = %q, want %q", in, got, want)
		}
	}
}
