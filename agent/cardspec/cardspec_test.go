package cardspec

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	qnvml "github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/agent/nvml/fakespec"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// fakeDriverRoot lays out a driver root as the driver installs it: device
// nodes under dev/ (character devices of the driver's major 195: nvcdi
// takes nothing else for one; mknod needs root, as make test has), the
// libraries of the fake NVML's driver version, nvidia-smi.
func fakeDriverRoot(t *testing.T, cards int) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]uint32{"nvidiactl": 255}
	for i := range cards {
		nodes["nvidia"+strconv.Itoa(i)] = uint32(i)
	}
	for name, minor := range nodes {
		if err := unix.Mknod(filepath.Join(root, "dev", name), unix.S_IFCHR|0o666, int(unix.Mkdev(195, minor))); err != nil {
			t.Fatalf("mknod (make test runs as root): %v", err)
		}
	}
	files := []string{"usr/bin/nvidia-smi"}
	for _, lib := range []string{"libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"} {
		files = append(files, "usr/lib/x86_64-linux-gnu/"+lib+"."+fakespec.DriverVersion)
	}
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func fakeNVML(t *testing.T, spec string) *qnvml.Fake {
	t.Helper()
	cards, err := qnvml.ParseFakeSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	return qnvml.NewFake(cards, "node-a", "")
}

// TestWriteNamesEveryCardTwiceAndNeverAll: the spec holds each card under
// its UUID and its index with its own device node only, the driver's files
// as common edits at host paths, and no "all".
func TestWriteNamesEveryCardTwiceAndNeverAll(t *testing.T) {
	root := fakeDriverRoot(t, 2)
	out := t.TempDir()
	f := fakeNVML(t, "2xT4")
	res, err := Write(Options{Kind: DefaultKind, Dir: out, DriverRoot: "/host-driver", DriverRootCtrPath: root,
		DevRoot: "/host-driver", DevRootCtrPath: root, HookPath: "/usr/local/nvidia/toolkit/nvidia-cdi-hook", NVML: f})
	if err != nil {
		t.Fatal(err)
	}
	if res.Path != filepath.Join(out, "qgpu.io-gpu.yaml") {
		t.Errorf("path %s", res.Path)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(out), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("the CDI library refuses the spec: %v", errs)
	}
	want := []string{"0", "1", fakespec.UUID("node-a", 0), fakespec.UUID("node-a", 1)}
	got := slices.Sorted(slices.Values(res.Devices))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("devices %v, want %v", got, want)
	}
	for i, id := range []string{"0", "1"} {
		for _, name := range []string{id, fakespec.UUID("node-a", i)} {
			d := cache.GetDevice("qgpu.io/gpu=" + name)
			if d == nil {
				t.Fatalf("no device %s", name)
			}
			var nodes []string
			for _, n := range d.ContainerEdits.DeviceNodes {
				nodes = append(nodes, n.Path+"<"+n.HostPath)
			}
			if w := "/dev/nvidia" + id + "</host-driver/dev/nvidia" + id; !slices.Equal(nodes, []string{w}) {
				t.Errorf("device %s: nodes %v, want [%s]", name, nodes, w)
			}
		}
	}
	raw, _ := os.ReadFile(res.Path)
	for _, want := range []string{"hostPath: /host-driver/dev/nvidiactl", "hostPath: /host-driver/usr/lib/x86_64-linux-gnu/libcuda.so." + fakespec.DriverVersion,
		"NVIDIA_VISIBLE_DEVICES=void", "/usr/local/nvidia/toolkit/nvidia-cdi-hook"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("spec lacks %q:\n%s", want, raw)
		}
	}
	if strings.Contains(string(raw), root) {
		t.Errorf("spec names the agent's own view of the driver root %s:\n%s", root, raw)
	}
	if strings.Contains(string(raw), "name: all") {
		t.Errorf("spec has a device all:\n%s", raw)
	}
}

// TestWriteWithoutHooks: no hook path, no hooks (a node without NVIDIA's
// toolkit could not run them).
func TestWriteWithoutHooks(t *testing.T) {
	root := fakeDriverRoot(t, 1)
	out := t.TempDir()
	res, err := Write(Options{Kind: "example.com/card", Dir: out, DriverRoot: "/", DriverRootCtrPath: root,
		DevRoot: "/", DevRootCtrPath: root, NVML: fakeNVML(t, "1xT4")})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(res.Path)
	if strings.Contains(string(raw), "hooks") {
		t.Errorf("hooks without a hook path:\n%s", raw)
	}
	if filepath.Base(res.Path) != "example.com-card.yaml" {
		t.Errorf("path %s", res.Path)
	}
}

// TestBadOptionsWriteNothing: each bad option is named, and nothing is written.
func TestBadOptionsWriteNothing(t *testing.T) {
	root := fakeDriverRoot(t, 1)
	good := Options{Kind: DefaultKind, DriverRoot: "/", DriverRootCtrPath: root, DevRoot: "/", DevRootCtrPath: root, NVML: fakeNVML(t, "1xT4")}
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"kind without class", func(o *Options) { o.Kind = "qgpu.io" }, `--cdi-card-kind "qgpu.io"`},
		{"kind with bad vendor", func(o *Options) { o.Kind = "qgpu io/gpu" }, `--cdi-card-kind "qgpu io/gpu"`},
		{"relative driver root", func(o *Options) { o.DriverRoot = "run/nvidia/driver" }, `--driver-root "run/nvidia/driver"`},
		{"relative hook", func(o *Options) { o.HookPath = "nvidia-cdi-hook" }, `--cdi-hook-path "nvidia-cdi-hook"`},
		{"no device nodes", func(o *Options) { o.DevRootCtrPath = t.TempDir() }, "device node under --dev-root-ctr-path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			o.Dir = t.TempDir()
			tc.edit(&o)
			_, err := Write(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
			if entries, _ := os.ReadDir(o.Dir); len(entries) > 0 {
				t.Errorf("wrote %v", entries)
			}
		})
	}
}

// TestGPUOperatorNodeServed: on a node whose only NVIDIA spec is GPU
// Operator's management.nvidia.com/gpu=all, no card can be handed out
// (all would give every card); with the agent's card spec written at
// start, each card resolves to its own device under the agent's kind.
func TestGPUOperatorNodeServed(t *testing.T) {
	root := fakeDriverRoot(t, 2)
	dir := t.TempDir()
	management := `cdiVersion: 0.5.0
kind: management.nvidia.com/gpu
devices:
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia1
`
	if err := os.WriteFile(filepath.Join(dir, "management.nvidia.com-gpu.yaml"), []byte(management), 0o644); err != nil {
		t.Fatal(err)
	}
	f := fakeNVML(t, "2xT4")
	card := []protocol.Slice{{Index: 1, UUID: fakespec.UUID("node-a", 1), MemoryGiB: 4, Cores: 30}}
	before, err := enforce.NewCDISpecs(dir, []string{dir}, DefaultKind, enforce.CDICardKind, enforce.CDIDevicePluginKind)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := before.CardDevices(card); !errors.Is(err, enforce.ErrCDIDeviceMissing) {
		t.Fatalf("management spec only: %v, want ErrCDIDeviceMissing", err)
	}
	if _, err := Write(Options{Kind: DefaultKind, Dir: dir, DriverRoot: "/", DriverRootCtrPath: root,
		DevRoot: "/", DevRootCtrPath: root, NVML: f}); err != nil {
		t.Fatal(err)
	}
	after, err := enforce.NewCDISpecs(dir, []string{dir}, DefaultKind, enforce.CDICardKind, enforce.CDIDevicePluginKind)
	if err != nil {
		t.Fatal(err)
	}
	names, err := after.CardDevices(card)
	if err != nil || !slices.Equal(names, []string{"qgpu.io/gpu=" + fakespec.UUID("node-a", 1)}) {
		t.Errorf("with the card spec: %v, %v; want [qgpu.io/gpu=%s]", names, err, fakespec.UUID("node-a", 1))
	}
}
