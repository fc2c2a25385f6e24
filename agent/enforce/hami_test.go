package enforce

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

// hamiNode is a node's HAMi-core files in a temporary directory: the
// library directory holds libs, the region root and lock directory do not
// exist yet.
func hamiNode(t *testing.T, libs ...string) HAMiOptions {
	t.Helper()
	root := t.TempDir()
	opts := HAMiOptions{LibDir: filepath.Join(root, "usr-local-vgpu"), RegionRoot: filepath.Join(root, "regions"),
		LockDir: filepath.Join(root, "vgpulock")}
	if err := os.Mkdir(opts.LibDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range libs {
		if err := os.WriteFile(filepath.Join(opts.LibDir, l), []byte("ELF"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return opts
}

func TestFindHAMiLib(t *testing.T) {
	tests := []struct {
		name    string
		libs    []string
		libName string
		want    string // "" : ErrHAMiLibMissing
	}{
		{"plain", []string{"libvgpu.so"}, "", "libvgpu.so"},
		{"versioned only (HAMi's installer)", []string{"libvgpu.so.v2.9.0"}, "", "libvgpu.so.v2.9.0"},
		{"versioned beats plain", []string{"libvgpu.so", "libvgpu.so.2.4.1"}, "", "libvgpu.so.2.4.1"},
		{"numeric, not lexical", []string{"libvgpu.so.v2.9.1", "libvgpu.so.v2.10.0", "libvgpu.so.v2.2"}, "", "libvgpu.so.v2.10.0"},
		{"longer version is newer", []string{"libvgpu.so.2.9", "libvgpu.so.2.9.1"}, "", "libvgpu.so.2.9.1"},
		{"same version, by name", []string{"libvgpu.so.v2.9.0", "libvgpu.so.2.9.0"}, "", "libvgpu.so.v2.9.0"},
		{"not versions ignored", []string{"libvgpu.so.bak", "libvgpu.so.old.1", "libvgpu.so"}, "", "libvgpu.so"},
		{"only non-versions", []string{"libvgpu.so.bak", "libcuda.so.1"}, "", ""},
		{"empty dir", nil, "", ""},
		{"configured name", []string{"libvgpu.so.v2.10.0", "libvgpu.so.v2.9.0"}, "libvgpu.so.v2.9.0", "libvgpu.so.v2.9.0"},
		{"configured name missing", []string{"libvgpu.so.v2.10.0"}, "libvgpu.so.v2.8.0", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := hamiNode(t, tc.libs...)
			got, err := FindHAMiLib(opts.LibDir, tc.libName)
			if tc.want == "" {
				if !errors.Is(err, ErrHAMiLibMissing) {
					t.Fatalf("got %q, %v; want ErrHAMiLibMissing", got, err)
				}
				return
			}
			if err != nil || got != filepath.Join(opts.LibDir, tc.want) {
				t.Errorf("got %q, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestFindHAMiLibErrors(t *testing.T) {
	opts := hamiNode(t)
	if err := os.Mkdir(filepath.Join(opts.LibDir, "libvgpu.so.2.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := FindHAMiLib(opts.LibDir, "")
	if !errors.Is(err, ErrHAMiLibMissing) || !strings.Contains(err.Error(), opts.LibDir) {
		t.Errorf("a directory named like the library: %v (want ErrHAMiLibMissing naming %s)", err, opts.LibDir)
	}
	if _, err := FindHAMiLib(filepath.Join(opts.LibDir, "absent"), ""); !errors.Is(err, ErrHAMiLibMissing) {
		t.Errorf("missing dir: %v", err)
	}
	if _, err := FindHAMiLib(opts.LibDir, "../libvgpu.so"); !errors.Is(err, ErrHAMiConfig) {
		t.Errorf("a path as name: %v", err)
	}
}

func TestNewHAMiCoreRefuses(t *testing.T) {
	good := hamiNode(t, "libvgpu.so.v2.9.0")
	tests := []struct {
		name string
		edit func(*HAMiOptions)
		want error
	}{
		{"no library", func(o *HAMiOptions) { o.LibDir = hamiNode(t).LibDir }, ErrHAMiLibMissing},
		{"no lib dir", func(o *HAMiOptions) { o.LibDir = "" }, ErrHAMiConfig},
		{"no region root", func(o *HAMiOptions) { o.RegionRoot = "" }, ErrHAMiConfig},
		{"relative lock dir", func(o *HAMiOptions) { o.LockDir = "tmp/vgpulock" }, ErrHAMiConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			if _, err := New(NameHAMiCore, Options{HAMi: o}); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(good.RegionRoot); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused start created the region root: %v", err)
	}
}

func TestHAMiCoreMemory(t *testing.T) {
	opts := hamiNode(t, "libvgpu.so", "libvgpu.so.v2.9.0")
	b, err := New(NameHAMiCore, Options{HAMi: opts})
	if err != nil {
		t.Fatal(err)
	}
	preload := filepath.Join(opts.RegionRoot, HAMiPreloadName)
	if data, err := os.ReadFile(preload); err != nil || string(data) != "/usr/local/vgpu/libvgpu.so\n" {
		t.Errorf("ld.so.preload = %q, %v", data, err)
	}
	r := req(protocol.ResourceMemory, protocol.ClassOffline, protocol.PolicyBurstShare, shared)
	r.PodUID = "0b7e3c1a-5d2f-4c8e-9a1b-2c3d4e5f6a7b"
	got, err := b.Allocate(r)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(opts.RegionRoot, r.PodUID+"_c")
	wantEnvs := map[string]string{
		"NVIDIA_VISIBLE_DEVICES": "GPU-1", "QGPU_CARD_INDEX": "1", "QGPU_MEMORY_GIB": "4",
		"QGPU_CLASS": "offline", "QGPU_POLICY": "burst-share",
		"CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/vgpu/cudevshr.cache",
	}
	for k, v := range perCard("CUDA_DEVICE_MEMORY_LIMIT", "4096m") {
		wantEnvs[k] = v
	}
	wantMounts := []*pluginapi.Mount{
		{ContainerPath: "/usr/local/vgpu/libvgpu.so", HostPath: filepath.Join(opts.LibDir, "libvgpu.so.v2.9.0"), ReadOnly: true},
		{ContainerPath: "/etc/ld.so.preload", HostPath: preload, ReadOnly: true},
		{ContainerPath: "/tmp/vgpu", HostPath: dir},
		{ContainerPath: "/tmp/vgpulock", HostPath: filepath.Join(opts.LockDir, "GPU-1")}, // the card's own
		// HAMi-core reads /overrideEnv over the environment: an empty file, read-only.
		{ContainerPath: "/overrideEnv", HostPath: filepath.Join(opts.RegionRoot, "override-env.empty"), ReadOnly: true},
	}
	if b, err := os.ReadFile(filepath.Join(opts.RegionRoot, "override-env.empty")); err != nil || len(b) != 0 {
		t.Errorf("the mounted /overrideEnv: %q, %v; want an empty file", b, err)
	}
	if diff := cmp.Diff(wantEnvs, got.Envs); diff != "" {
		t.Errorf("envs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantMounts, got.Mounts, cmpProto); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
	if len(got.Devices) != 0 {
		t.Errorf("the backend passes no device nodes (the allocator adds the card's): %v", got.Devices)
	}
	for path, want := range map[string]os.FileMode{dir: 0o777, filepath.Join(opts.LockDir, "GPU-1"): 0o777 | os.ModeSticky, opts.LockDir: 0o755, opts.RegionRoot: 0o755} {
		if fi, err := os.Stat(path); err != nil || !fi.IsDir() || fi.Mode()&(os.ModePerm|os.ModeSticky) != want {
			t.Errorf("%s: %v %v, want a directory with mode %v", path, fi.Mode(), err, want)
		}
	}
	// A re-issued Allocate keeps the region its running processes share.
	region := filepath.Join(dir, "cudevshr.cache")
	if err := os.WriteFile(region, []byte("region"), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Allocate(r); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(region); string(data) != "region" {
		t.Errorf("a second Allocate changed the region: %q", data)
	}
}

func TestHAMiCoreMultiCard(t *testing.T) {
	opts := hamiNode(t, "libvgpu.so")
	b, err := New(NameHAMiCore, Options{HAMi: opts})
	if err != nil {
		t.Fatal(err)
	}
	r := req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, whole0, whole2)
	r.PodUID = "uid-1"
	got, err := b.Allocate(r)
	if err != nil {
		t.Fatal(err)
	}
	if got.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "8192m" || got.Envs["CUDA_DEVICE_MEMORY_LIMIT_1"] != "8192m" || got.Envs["NVIDIA_VISIBLE_DEVICES"] != "GPU-0,GPU-2" {
		t.Errorf("memory envs %v", got.Envs)
	}
}

// perCard is HAMi-core's per-card form of name for every ordinal it reads:
// vals by ordinal, the last one repeated up to the bound.
func perCard(name string, vals ...string) map[string]string {
	out := map[string]string{}
	for i := range hamiCardForms {
		out[name+"_"+strconv.Itoa(i)] = vals[min(i, len(vals)-1)]
	}
	return out
}

// with returns m with the entries of more added.
func with(m map[string]string, more ...map[string]string) map[string]string {
	for _, x := range more {
		for k, v := range x {
			m[k] = v
		}
	}
	return m
}

func TestHAMiCoreRefusesAtAllocate(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(HAMiOptions, *Request)
		want    error
	}{
		{"library removed after start", func(o HAMiOptions, _ *Request) { os.Remove(filepath.Join(o.LibDir, "libvgpu.so.3")) }, ErrHAMiLibMissing},
		{"ld.so.preload removed", func(o HAMiOptions, _ *Request) { os.Remove(filepath.Join(o.RegionRoot, HAMiPreloadName)) }, ErrHAMiConfig},
		{"container name escaping the root", func(_ HAMiOptions, r *Request) { r.Container = "../x" }, nil},
		{"pod UID with the separator", func(_ HAMiOptions, r *Request) { r.PodUID = "a_b" }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := hamiNode(t, "libvgpu.so.3")
			b, err := New(NameHAMiCore, Options{HAMi: opts})
			if err != nil {
				t.Fatal(err)
			}
			r := req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, shared)
			r.PodUID = "uid-1"
			tc.breakIt(opts, &r)
			_, err = b.Allocate(r)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
			entries, _ := os.ReadDir(opts.RegionRoot)
			for _, e := range entries {
				if e.IsDir() {
					t.Errorf("a refused Allocate created %s", e.Name())
				}
			}
		})
	}
}

func TestHAMiCoreCompute(t *testing.T) {
	b, err := New(NameHAMiCore, Options{HAMi: hamiNode(t, "libvgpu.so")})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		policy protocol.Policy
		slices []protocol.Slice
		want   map[string]string
	}{
		{protocol.PolicyFixedShare, []protocol.Slice{shared}, with(map[string]string{"QGPU_CORES": "30", "CUDA_DEVICE_SM_LIMIT": "30", "GPU_CORE_UTILIZATION_POLICY": "force"},
			perCard("CUDA_DEVICE_SM_LIMIT", "30"))},
		{protocol.PolicyBurstShare, []protocol.Slice{shared}, with(map[string]string{"QGPU_CORES": "30", "CUDA_DEVICE_SM_LIMIT": "30", "GPU_CORE_UTILIZATION_POLICY": "default"},
			perCard("CUDA_DEVICE_SM_LIMIT", "30"))},
		{protocol.PolicyBestEffort, []protocol.Slice{shared}, map[string]string{"QGPU_CORES": "30", "GPU_CORE_UTILIZATION_POLICY": "disable"}},
		{protocol.PolicyFixedShare, []protocol.Slice{whole0, whole2}, map[string]string{"QGPU_CORES": "200", "GPU_CORE_UTILIZATION_POLICY": "disable"}},
	}
	for _, tc := range tests {
		got, err := b.Allocate(req(protocol.ResourceCore, protocol.ClassGeneral, tc.policy, tc.slices...))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got.Envs); diff != "" || len(got.Mounts) != 0 {
			t.Errorf("%s %d slices (-want +got):\n%s mounts %v", tc.policy, len(tc.slices), diff, got.Mounts)
		}
	}
}

// hamiCoreLimits is what HAMi-core makes of a container's environment when
// its first process creates the region (do_init_device_memory_limits and
// do_init_device_sm_limits, get_limit_from_env in
// multiprocess_memory_limit.c): per ordinal the per-card form when set and
// non-zero, else the plain variable; no SM limit at all is 100. Values are
// bytes with an optional k, m or g suffix.
func hamiCoreLimits(env map[string]string) (mem, sm [hamiCardForms]uint64) {
	parse := func(name string) uint64 {
		v := env[name]
		scale := uint64(1)
		if n := len(v); n > 0 {
			switch v[n-1] {
			case 'G', 'g':
				scale = 1 << 30
			case 'M', 'm':
				scale = 1 << 20
			case 'K', 'k':
				scale = 1 << 10
			}
		}
		digits := strings.TrimRightFunc(v, func(r rune) bool { return r < '0' || r > '9' })
		n, _ := strconv.ParseUint(digits, 10, 64)
		return n * scale
	}
	memFallback, smFallback := parse("CUDA_DEVICE_MEMORY_LIMIT"), parse("CUDA_DEVICE_SM_LIMIT")
	if smFallback == 0 {
		smFallback = 100
	}
	for i := range hamiCardForms {
		mem[i], sm[i] = memFallback, smFallback
		if v := parse("CUDA_DEVICE_MEMORY_LIMIT_" + strconv.Itoa(i)); v > 0 {
			mem[i] = v
		}
		if v := parse("CUDA_DEVICE_SM_LIMIT_" + strconv.Itoa(i)); v > 0 {
			sm[i] = v
		}
	}
	return mem, sm
}

// TestHAMiCorePodCannotLiftItsLimits: a pod that sets HAMi-core's limit
// variables in its own spec, in any form the library reads, still gets
// its slice once the runtime has applied the agent's CDI specs: HAMi-core
// reads a per-card form before the plain one, so the agent sets them all.
func TestHAMiCorePodCannotLiftItsLimits(t *testing.T) {
	tests := []struct {
		name string
		env  []string
	}{
		{"per-card SM limit", []string{"CUDA_DEVICE_SM_LIMIT_0=100"}},
		{"per-card SM and memory limits", []string{"CUDA_DEVICE_SM_LIMIT_0=100", "CUDA_DEVICE_MEMORY_LIMIT_0=80g"}},
		{"per-card SM limit of zero (the plain one then)", []string{"CUDA_DEVICE_SM_LIMIT_0=0", "CUDA_DEVICE_SM_LIMIT=0"}},
		{"the last ordinal the library reads", []string{"CUDA_DEVICE_SM_LIMIT_15=100", "CUDA_DEVICE_MEMORY_LIMIT_15=80g"}},
		{"plain variables", []string{"CUDA_DEVICE_SM_LIMIT=100", "CUDA_DEVICE_MEMORY_LIMIT=80g"}},
		{"every form", append(slicesOf(perCard("CUDA_DEVICE_SM_LIMIT", "100")), slicesOf(perCard("CUDA_DEVICE_MEMORY_LIMIT", "80g"))...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem, sm := hamiCoreLimits(hamiCoreOverCDI(t, tc.env, nil))
			for i := range hamiCardForms {
				if mem[i] != 4<<30 || sm[i] != 30 {
					t.Errorf("ordinal %d: HAMi-core would cap memory at %d bytes and SM at %d%%, want %d and 30", i, mem[i], sm[i], 4<<30)
				}
			}
		})
	}
}

func slicesOf(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// A HAMi pod that asks no nvidia.com/gpucores is not throttled (HAMi's
// rule, VocabularyEnv), also when the answer travels in a CDI spec (the
// agent's default strategy): the vocabulary's edit rides on the request
// and is applied before delivery. Applied to the answer afterwards, as
// before, it found no variables there (they had moved into the spec) and
// the container kept the backend's 30 % cap.
func TestVocabularyEditReachesTheCDISpec(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{
		vocab.HAMiGPU: resource.MustParse("1"), vocab.HAMiMemory: resource.MustParse("4096")}}}}}}
	edit := func(envs map[string]string) { VocabularyEnv(vocab.HAMiGPU, pod, "c", []protocol.Slice{shared}, envs) }
	_, sm := hamiCoreLimits(hamiCoreOverCDI(t, nil, edit))
	for i := range hamiCardForms {
		if sm[i] != 100 {
			t.Errorf("ordinal %d: SM capped at %d%%, want no cap (100: a HAMi pod without gpucores)", i, sm[i])
		}
	}
}

// hamiCoreOverCDI allocates the shared slice's memory and cores from a
// hami-core backend delivering through CDI, each request carrying edit
// (nil: none), and returns the environment the runtime makes of the
// answers' CDI devices over a pod that sets podEnv itself.
func hamiCoreOverCDI(t *testing.T, podEnv []string, edit func(map[string]string)) map[string]string {
	t.Helper()
	specs, static := cdiNode(t, "GPU-1")
	d, err := NewDelivery(StrategyCDICRI, specs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(NameHAMiCore, Options{HAMi: hamiNode(t, "libvgpu.so"), Delivery: d})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, res := range []string{protocol.ResourceMemory, protocol.ResourceCore} {
		r := req(res, protocol.ClassGeneral, protocol.PolicyFixedShare, shared)
		r.PodUID, r.Container, r.Edit = "uid-1", "c", edit
		resp, err := b.Allocate(r)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, cdiNames(resp)...)
	}
	return effectiveEnv(injectOver(t, specs, static, names, podEnv).Process.Env)
}
