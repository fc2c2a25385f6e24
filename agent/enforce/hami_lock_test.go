package enforce

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// lockDirOf is the host directory a memory answer mounts at /tmp/vgpulock.
func lockDirOf(t *testing.T, b Backend, r Request) string {
	t.Helper()
	resp, err := b.Allocate(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range resp.Mounts {
		if m.ContainerPath == HAMiContainerLockDir {
			return m.HostPath
		}
	}
	t.Fatalf("no %s mount in %v", HAMiContainerLockDir, resp.Mounts)
	return ""
}

// TestHAMiCoreLockDirPerCard: /tmp/vgpulock is the container's card's own
// directory under --hami-lock-dir, not one node-wide directory: the lock
// only serialises host-PID detection, which diffs NVML's process list of
// the first card, so containers on other cards need not share it, and a
// tenant holding the lock (HAMi-core builds from a8b3d73 until 8f3a89c's
// per-region semaphore; the flock build blocks without a timeout) stalls
// only the first CUDA call of the containers on its own card. Two cards,
// two directories; one card, one; a two-card container takes its first
// card's (the lowest index, as NVML enumerates them). The root itself is
// not for the containers: created 0755. Fails on eebf961, which mounted
// the root in every container.
func TestHAMiCoreLockDirPerCard(t *testing.T) {
	opts := hamiNode(t, "libvgpu.so")
	b, err := New(NameHAMiCore, Options{HAMi: opts})
	if err != nil {
		t.Fatal(err)
	}
	other := protocol.Slice{Index: 2, UUID: "GPU-2", MemoryGiB: 4, Cores: 30}
	mem := func(pod string, slices ...protocol.Slice) Request {
		r := req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, slices...)
		r.PodUID = pod
		return r
	}
	got := map[string]string{
		"a on GPU-1":     lockDirOf(t, b, mem("uid-a", shared)),
		"b on GPU-1":     lockDirOf(t, b, mem("uid-b", shared)),
		"c on GPU-2":     lockDirOf(t, b, mem("uid-c", other)),
		"d on GPU-2, -0": lockDirOf(t, b, mem("uid-d", whole2, whole0)),
	}
	want := map[string]string{
		"a on GPU-1":     filepath.Join(opts.LockDir, "GPU-1"),
		"b on GPU-1":     filepath.Join(opts.LockDir, "GPU-1"),
		"c on GPU-2":     filepath.Join(opts.LockDir, "GPU-2"),
		"d on GPU-2, -0": filepath.Join(opts.LockDir, "GPU-0"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lock directories (-want +got):\n%s", diff)
	}
	for path, mode := range map[string]os.FileMode{
		opts.LockDir:                         0o755,
		filepath.Join(opts.LockDir, "GPU-1"): 0o777 | os.ModeSticky,
		filepath.Join(opts.LockDir, "GPU-2"): 0o777 | os.ModeSticky,
	} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
		} else if !fi.IsDir() || fi.Mode()&(os.ModePerm|os.ModeSticky) != mode {
			t.Errorf("%s: %v, want a directory with mode %v", path, fi.Mode(), mode)
		}
	}
	// A UUID that would leave the root is refused, and nothing is made.
	bad := protocol.Slice{Index: 3, UUID: "../GPU-3", MemoryGiB: 4, Cores: 30}
	if _, err := b.Allocate(mem("uid-e", bad)); err == nil {
		t.Error("card UUID ../GPU-3: no error")
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(opts.LockDir), "GPU-3")); !os.IsNotExist(err) {
		t.Errorf("a refused card UUID made a directory beside the root: %v", err)
	}
}
