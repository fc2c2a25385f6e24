package enforce

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// mknod makes a character device node like the driver's (major 195); tests
// that need one skip where that is not allowed (not root).
func mknod(t *testing.T, dir, name string, minor int) {
	t.Helper()
	if err := unix.Mknod(filepath.Join(dir, name), unix.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(minor)))); err != nil {
		t.Skipf("cannot create device nodes here: %v", err)
	}
}

// minorFromUUID maps "GPU-N" to N, as the fake cards do.
func minorFromUUID(uuid string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(uuid, "GPU-"))
	return n, err == nil
}

func TestDeviceNodesSpecs(t *testing.T) {
	dir := t.TempDir()
	for i := range 3 {
		mknod(t, dir, "nvidia"+strconv.Itoa(i), i)
	}
	mknod(t, dir, "nvidiactl", 255)
	// A regular file is not a device node.
	if err := os.WriteFile(filepath.Join(dir, "nvidia3"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := DeviceNodes{Root: dir, Minor: minorFromUUID}
	spec := func(name string) *pluginapi.DeviceSpec {
		return &pluginapi.DeviceSpec{ContainerPath: "/dev/" + name, HostPath: filepath.Join(dir, name), Permissions: "rw"}
	}
	for _, tc := range []struct {
		name        string
		slices      []protocol.Slice
		want        []*pluginapi.DeviceSpec
		wantMissing []string
	}{
		{"one card", []protocol.Slice{{Index: 1, UUID: "GPU-1"}}, []*pluginapi.DeviceSpec{spec("nvidia1"), spec("nvidiactl")}, nil},
		{"two cards", []protocol.Slice{{Index: 2, UUID: "GPU-2"}, {Index: 0, UUID: "GPU-0"}},
			[]*pluginapi.DeviceSpec{spec("nvidia2"), spec("nvidia0"), spec("nvidiactl")}, nil},
		{"missing and regular file", []protocol.Slice{{Index: 3, UUID: "GPU-3"}, {Index: 7, UUID: "GPU-7"}, {UUID: "unknown"}},
			[]*pluginapi.DeviceSpec{spec("nvidiactl")}, []string{"GPU-3", "GPU-7", "unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, missing := d.Specs(tc.slices)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b *pluginapi.DeviceSpec) bool { return a.String() == b.String() })); diff != "" {
				t.Errorf("specs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantMissing, missing); diff != "" {
				t.Errorf("missing (-want +got):\n%s", diff)
			}
		})
	}
}
