package enforce

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// cdiNode writes a node's NVIDIA spec as nvidia-ctk would (one device per
// card UUID with its device node, nvidiactl for all) with the CDI library,
// and returns the agent's specs over it.
func cdiNode(t *testing.T, uuids ...string) (*CDISpecs, string) {
	t.Helper()
	static, dynamic := t.TempDir(), t.TempDir()
	spec := &cdispec.Spec{Version: "0.5.0", Kind: CDICardKind,
		ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{
			{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}}}}
	for i, u := range uuids {
		spec.Devices = append(spec.Devices, cdispec.Device{Name: u, ContainerEdits: cdispec.ContainerEdits{
			DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidia" + strconv.Itoa(i), Type: "c", Major: 195, Minor: int64(i)}}}})
	}
	if len(uuids) > 0 {
		w, err := cdi.NewCache(cdi.WithSpecDirs(static), cdi.WithAutoRefresh(false))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteSpec(spec, "nvidia.yaml"); err != nil {
			t.Fatal(err)
		}
	}
	specs, err := NewCDISpecs(dynamic, []string{static, dynamic})
	if err != nil {
		t.Fatal(err)
	}
	return specs, static
}

// podEnv is what a pod that tries to widen its slice sets in its own spec.
var podEnv = []string{"NVIDIA_VISIBLE_DEVICES=all", "QGPU_MEMORY_GIB=999", "CUDA_DEVICE_MEMORY_LIMIT_0=99999m",
	"CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/mine", "GPU_CORE_UTILIZATION_POLICY=disable", "CUDA_DEVICE_SM_LIMIT=100", "PATH=/bin"}

// inject applies the answers' CDI devices to an OCI spec that already holds
// podEnv, as the runtime does (the pod's environment first, then CDI).
func inject(t *testing.T, specs *CDISpecs, static string, names []string) *oci.Spec {
	t.Helper()
	return injectOver(t, specs, static, names, podEnv)
}

// injectOver is inject over another pod environment.
func injectOver(t *testing.T, specs *CDISpecs, static string, names, env []string) *oci.Spec {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(static, specs.Dir()), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	for path, errs := range cache.GetErrors() {
		t.Errorf("CDI spec %s: %v", path, errs)
	}
	s := &oci.Spec{Process: &oci.Process{Env: append([]string(nil), env...)}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(s, names...); err != nil {
		t.Fatalf("injecting %v: %v (unresolved %v)", names, err, unresolved)
	}
	return s
}

// effectiveEnv is the environment the container's process gets from an
// OCI spec's list: the last entry of a name wins. The CDI library appends
// its variables after the ones already in the spec (it does not replace
// them), and runc sets the list in order, so the later one is the one the
// process sees; make e2e-node checks the same on containerd and runc.
func effectiveEnv(env []string) map[string]string {
	out := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

func cdiNames(resp *pluginapi.ContainerAllocateResponse) []string {
	var out []string
	for _, d := range resp.CdiDevices {
		out = append(out, d.Name)
	}
	return out
}

// TestCDIDeliveryEnvOverride: under cdi-cri, the card is named from the
// node's NVIDIA spec, every variable and mount of the backend is in the
// container's own spec, and a pod environment that tries to widen the
// slice loses to it once the runtime applies the specs.
func TestCDIDeliveryEnvOverride(t *testing.T) {
	specs, static := cdiNode(t, "GPU-0", "GPU-1")
	hami := hamiNode(t, "libvgpu.so.v2.6.0")
	d, err := NewDelivery(StrategyCDICRI, specs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(NameHAMiCore, Options{HAMi: hami, Delivery: d})
	if err != nil {
		t.Fatal(err)
	}
	r := req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, shared)
	r.PodUID = "uid-1"
	mem, err := b.Allocate(r)
	if err != nil {
		t.Fatal(err)
	}
	r.Resource = protocol.ResourceCore
	core, err := b.Allocate(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(mem.Envs)+len(mem.Mounts)+len(core.Envs)+len(core.Mounts) != 0 {
		t.Errorf("answers carry variables or mounts the pod could override: %v %v %v %v", mem.Envs, mem.Mounts, core.Envs, core.Mounts)
	}
	wantMem := []string{"nvidia.com/gpu=GPU-1", "qgpu.io/container=uid-1_c_qgpu-memory"}
	if diff := cmp.Diff(wantMem, cdiNames(mem)); diff != "" {
		t.Errorf("memory answer's CDI devices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"qgpu.io/container=uid-1_c_qgpu-core"}, cdiNames(core)); diff != "" {
		t.Errorf("core answer's CDI devices (-want +got):\n%s", diff)
	}
	s := inject(t, specs, static, append(cdiNames(mem), cdiNames(core)...))
	env := effectiveEnv(s.Process.Env)
	for k, want := range map[string]string{
		"NVIDIA_VISIBLE_DEVICES": "GPU-1", "QGPU_MEMORY_GIB": "4", "CUDA_DEVICE_MEMORY_LIMIT_0": "4096m",
		"CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/vgpu/cudevshr.cache", "GPU_CORE_UTILIZATION_POLICY": "force",
		"CUDA_DEVICE_SM_LIMIT": "30", "PATH": "/bin",
	} {
		if env[k] != want {
			t.Errorf("after injection %s=%q, want %q", k, env[k], want)
		}
	}
	if diff := cmp.Diff([]string{"/dev/nvidia1", "/dev/nvidiactl"}, deviceNodes(s)); diff != "" {
		t.Errorf("device nodes (-want +got):\n%s", diff)
	}
	mounts := map[string]bool{}
	for _, m := range s.Mounts {
		mounts[m.Destination] = true
	}
	for _, p := range []string{HAMiContainerLib, HAMiContainerPreload, HAMiContainerCacheDir, HAMiContainerLockDir} {
		if !mounts[p] {
			t.Errorf("no mount at %s after injection; mounts %v", p, s.Mounts)
		}
	}
}

// TestEnvvarIsCooperative is the defect CDI fixes: with the variables in
// the answer, the kubelet puts the pod's own after them (the device
// plugin's first, then the container's env) and the last wins.
func TestEnvvarIsCooperative(t *testing.T) {
	b, err := New(NameEnv, Options{Delivery: &Delivery{Strategy: StrategyEnvvar}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.Allocate(req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, shared))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for k, v := range resp.Envs {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	if got := effectiveEnv(append(env, podEnv...))["NVIDIA_VISIBLE_DEVICES"]; got != "all" {
		t.Fatalf("NVIDIA_VISIBLE_DEVICES with the pod's own after the answer: %q, want the pod's \"all\"", got)
	}
	if len(resp.CdiDevices) != 0 || len(resp.Annotations) != 0 {
		t.Errorf("envvar answered with CDI: %v %v", resp.CdiDevices, resp.Annotations)
	}
}

func TestCDIAnnotations(t *testing.T) {
	specs, static := cdiNode(t, "GPU-1")
	b, err := New(NameEnv, Options{Delivery: &Delivery{Strategy: StrategyCDIAnnotations, CDI: specs}})
	if err != nil {
		t.Fatal(err)
	}
	r := req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, shared)
	r.PodUID = "uid-2"
	resp, err := b.Allocate(r)
	if err != nil {
		t.Fatal(err)
	}
	keys, devices, err := cdi.ParseAnnotations(resp.Annotations)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"cdi.k8s.io/qgpu.io_qgpu-memory"}, keys); diff != "" {
		t.Errorf("annotation keys (-want +got):\n%s", diff)
	}
	s := inject(t, specs, static, devices)
	if got := effectiveEnv(s.Process.Env)["NVIDIA_VISIBLE_DEVICES"]; got != "GPU-1" {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q after injection", got)
	}
	if len(resp.CdiDevices) != 0 || len(resp.Envs) != 0 {
		t.Errorf("cdi-annotations answer also has %v %v", resp.CdiDevices, resp.Envs)
	}
}

// TestCDIMissingCard: a card the node's specs lack refuses the Allocate
// with the device's name and writes nothing.
func TestCDIMissingCard(t *testing.T) {
	specs, _ := cdiNode(t, "GPU-0")
	b, err := New(NameEnv, Options{Delivery: &Delivery{Strategy: StrategyCDICRI, CDI: specs}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Allocate(req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, shared))
	if !errors.Is(err, ErrCDIDeviceMissing) || !strings.Contains(err.Error(), "nvidia.com/gpu=GPU-1") {
		t.Fatalf("err = %v, want ErrCDIDeviceMissing naming nvidia.com/gpu=GPU-1", err)
	}
	if entries, _ := os.ReadDir(specs.Dir()); len(entries) != 0 {
		t.Errorf("refused Allocate left %d files in %s", len(entries), specs.Dir())
	}
}

// TestCDINodeSpecLater: a node spec generated after the agent started is
// found without a restart.
func TestCDINodeSpecLater(t *testing.T) {
	specs, static := cdiNode(t)
	if _, err := specs.CardDevices([]protocol.Slice{shared}); !errors.Is(err, ErrCDIDeviceMissing) {
		t.Fatalf("before the spec: %v", err)
	}
	w, _ := cdi.NewCache(cdi.WithSpecDirs(static), cdi.WithAutoRefresh(false))
	if err := w.WriteSpec(&cdispec.Spec{Version: "0.5.0", Kind: CDICardKind, Devices: []cdispec.Device{{Name: "GPU-1",
		ContainerEdits: cdispec.ContainerEdits{Env: []string{"X=1"}}}}}, "late.yaml"); err != nil {
		t.Fatal(err)
	}
	if _, err := specs.CardDevices([]protocol.Slice{shared}); err != nil {
		t.Errorf("after the spec: %v", err)
	}
}

func TestVolumeMounts(t *testing.T) {
	b, err := New(NameEnv, Options{Delivery: &Delivery{Strategy: StrategyVolumeMounts}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.Allocate(req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, whole0, whole2))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Envs["NVIDIA_VISIBLE_DEVICES"]; got != VolumeMountsRoot {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q, want %q", got, VolumeMountsRoot)
	}
	want := []*pluginapi.Mount{
		{ContainerPath: VolumeMountsRoot + "/GPU-0", HostPath: "/dev/null", ReadOnly: true},
		{ContainerPath: VolumeMountsRoot + "/GPU-2", HostPath: "/dev/null", ReadOnly: true},
	}
	if diff := cmp.Diff(want, resp.Mounts, cmpProto); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
	core, err := b.Allocate(req(protocol.ResourceCore, protocol.ClassGeneral, protocol.PolicyFixedShare, shared))
	if err != nil || len(core.Mounts) != 0 {
		t.Errorf("core answer: %v, mounts %v", err, core)
	}
}

func TestParseStrategy(t *testing.T) {
	for _, s := range Strategies {
		if got, err := ParseStrategy(string(s)); err != nil || got != s {
			t.Errorf("ParseStrategy(%q) = %q, %v", s, got, err)
		}
	}
	_, err := ParseStrategy("cdi")
	if err == nil || !strings.Contains(err.Error(), `--device-list-strategy "cdi"`) {
		t.Errorf("ParseStrategy(cdi) = %v, want an error naming the flag and value", err)
	}
	if _, err := NewDelivery(StrategyCDICRI, nil); err == nil {
		t.Error("cdi-cri without specs: no error")
	}
	if _, err := NewCDISpecs("relative", []string{"/etc/cdi"}); err == nil || !strings.Contains(err.Error(), `"relative"`) {
		t.Errorf("relative --cdi-spec-dir: %v", err)
	}
}

// TestCDISweep: the specs of pods that are gone go once past the grace;
// kept pods' specs, young specs and other files stay; at most max per call.
func TestCDISweep(t *testing.T) {
	specs, _ := cdiNode(t, "GPU-1")
	for _, uid := range []string{"gone-1", "gone-2", "kept"} {
		r := req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, shared)
		r.PodUID = uid
		if _, err := specs.Write(r, map[string]string{"A": "1"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(specs.Dir(), "nvidia.yaml")
	if err := os.WriteFile(other, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Hour)
	keep := map[string]bool{"kept": true}
	if n, err := specs.Sweep(keep, 2*time.Hour, now, 10); err != nil || n != 0 {
		t.Fatalf("within grace: removed %d, %v", n, err)
	}
	if n, err := specs.Sweep(keep, time.Minute, now, 1); err != nil || n != 1 {
		t.Fatalf("max 1: removed %d, %v", n, err)
	}
	if n, err := specs.Sweep(keep, time.Minute, now, 10); err != nil || n != 1 {
		t.Fatalf("second pass: removed %d, %v", n, err)
	}
	var left []string
	entries, _ := os.ReadDir(specs.Dir())
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if diff := cmp.Diff([]string{"nvidia.yaml", "qgpu.io-container_kept_c_qgpu-memory.yaml"}, left); diff != "" {
		t.Errorf("left (-want +got):\n%s", diff)
	}
}

func TestParseSpecFileName(t *testing.T) {
	for name, want := range map[string]string{
		"qgpu.io-container_0f9e-11_main_qgpu-memory.yaml": "0f9e-11",
		"qgpu.io-container_u_c_qgpu-core-greedy.yaml":     "u",
		"qgpu.io-container_u.yaml":                        "",
		"qgpu.io-container__c_x.yaml":                     "",
		"qgpu.io-container_u_c_x.json":                    "",
		"nvidia.yaml":                                     "",
		"qgpu.io-container_u_c/x.yaml":                    "",
	} {
		got, ok := ParseSpecFileName(name)
		if got != want || ok != (want != "") {
			t.Errorf("ParseSpecFileName(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

func FuzzParseSpecFileName(f *testing.F) {
	f.Add("qgpu.io-container_0f9e-11_main_qgpu-memory.yaml")
	f.Add("qgpu.io-container_u.yaml")
	f.Fuzz(func(t *testing.T, name string) {
		uid, ok := ParseSpecFileName(name)
		if ok && (uid == "" || strings.ContainsAny(uid, "/_") || !strings.HasPrefix(name, specPrefix+uid+"_")) {
			t.Errorf("ParseSpecFileName(%q) = %q", name, uid)
		}
	})
}

// nodeSpec writes one spec into dir as the named tool lays it out: a
// device per name (a card's node: "0" and "GPU-0" are card 0), plus "all"
// with every card's node, and nvidiactl for any of them.
func nodeSpec(t *testing.T, dir, file, kind string, names ...string) {
	t.Helper()
	node := func(i int) *cdispec.DeviceNode {
		return &cdispec.DeviceNode{Path: "/dev/nvidia" + strconv.Itoa(i), Type: "c", Major: 195, Minor: int64(i)}
	}
	spec := &cdispec.Spec{Version: "0.5.0", Kind: kind, ContainerEdits: cdispec.ContainerEdits{
		Env:         []string{"NVIDIA_VISIBLE_DEVICES=void"},
		DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}}}}
	for _, n := range names {
		i, err := strconv.Atoi(strings.TrimPrefix(n, "GPU-"))
		if err != nil {
			t.Fatal(err)
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: n, ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{node(i)}}})
	}
	spec.Devices = append(spec.Devices, cdispec.Device{Name: "all", ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{node(0), node(1)}}})
	w, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteSpec(spec, file); err != nil {
		t.Fatal(err)
	}
}

// TestCDICardOnGPUOperatorNodes: the card's device is found in the specs
// the node's tools wrote, under any kind a GPU Operator node has, by UUID
// before index, the preferred kind first; never "all" (the container gets
// only its card's node).
func TestCDICardOnGPUOperatorNodes(t *testing.T) {
	type spec struct{ file, kind string }
	var (
		ctk        = spec{"nvidia.yaml", CDICardKind}                                    // nvidia-ctk cdi generate
		plugin     = spec{"k8s.device-plugin.nvidia.com-gpu.json", CDIDevicePluginKind}  // NVIDIA's device plugin, cdi-cri
		management = spec{"management.nvidia.com-gpu.yaml", "management.nvidia.com/gpu"} // GPU Operator's toolkit
	)
	type written struct {
		s     spec
		names []string
	}
	tests := []struct {
		name  string
		specs []written
		kinds []string
		want  string // "" : refused
	}{
		{"nvidia-ctk v1.15 and later: index and UUID", []written{{ctk, []string{"0", "1", "GPU-0", "GPU-1"}}}, nil, "nvidia.com/gpu=GPU-1"},
		{"nvidia-ctk before v1.15: index only", []written{{ctk, []string{"0", "1"}}}, nil, "nvidia.com/gpu=1"},
		{"GPU Operator: management and the device plugin's by UUID", []written{{management, nil}, {plugin, []string{"GPU-0", "GPU-1"}}}, nil,
			"k8s.device-plugin.nvidia.com/gpu=GPU-1"},
		{"the device plugin by index", []written{{management, nil}, {plugin, []string{"0", "1"}}}, nil, "k8s.device-plugin.nvidia.com/gpu=1"},
		{"both by UUID: the preferred kind", []written{{plugin, []string{"GPU-0", "GPU-1"}}, {ctk, []string{"0", "1", "GPU-0", "GPU-1"}}}, nil,
			"nvidia.com/gpu=GPU-1"},
		{"a UUID before an index", []written{{ctk, []string{"0", "1"}}, {plugin, []string{"GPU-0", "GPU-1"}}}, nil,
			"k8s.device-plugin.nvidia.com/gpu=GPU-1"},
		{"another kind preferred", []written{{plugin, []string{"GPU-0", "GPU-1"}}, {ctk, []string{"GPU-0", "GPU-1"}}},
			[]string{CDIDevicePluginKind, CDICardKind}, "k8s.device-plugin.nvidia.com/gpu=GPU-1"},
		{"management only: all is no card's", []written{{management, nil}}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			static, dynamic := t.TempDir(), t.TempDir()
			for _, w := range tc.specs {
				nodeSpec(t, static, w.s.file, w.s.kind, w.names...)
			}
			specs, err := NewCDISpecs(dynamic, []string{static, dynamic}, tc.kinds...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := specs.CardDevices([]protocol.Slice{shared})
			if tc.want == "" {
				if !errors.Is(err, ErrCDIDeviceMissing) {
					t.Fatalf("got %v, %v; want ErrCDIDeviceMissing", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{tc.want}, got); diff != "" {
				t.Fatalf("devices (-want +got):\n%s", diff)
			}
			s := injectOver(t, specs, static, got, nil)
			if diff := cmp.Diff([]string{"/dev/nvidia1", "/dev/nvidiactl"}, deviceNodes(s)); diff != "" {
				t.Errorf("device nodes (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := NewCDISpecs(t.TempDir(), []string{t.TempDir()}, "gpu"); err == nil {
		t.Error("a card kind without a class: no error")
	}
}

// deviceNodes are the paths of the device nodes a spec gives, sorted.
func deviceNodes(s *oci.Spec) []string {
	var nodes []string
	for _, n := range s.Linux.Devices {
		nodes = append(nodes, n.Path)
	}
	sort.Strings(nodes)
	return nodes
}
