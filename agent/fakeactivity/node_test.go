package fakeactivity

import (
	"os"
	"path/filepath"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

const online, offline = "aaaaaaaa-0000-0000-0000-000000000001", "bbbbbbbb-0000-0000-0000-000000000002"

func TestSync(t *testing.T) {
	dir := t.TempDir()
	cards, _ := nvml.ParseFakeSpec("2xT4")
	fake := nvml.NewFake(cards, "n", "")
	grants := []store.Grant{
		{PodUID: online, Namespace: "default", Name: "on", Class: protocol.ClassOnline, Slices: []protocol.Slice{{Index: 0}}},
		{PodUID: offline, Namespace: "default", Name: "off", Class: protocol.ClassOffline, Slices: []protocol.Slice{{Index: 0}}},
	}
	file := filepath.Join(dir, "activity")
	n, err := New(fake, filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc"), file,
		func() ([]store.Grant, error) { return grants, nil })
	if err != nil {
		t.Fatal(err)
	}
	sync := func() {
		t.Helper()
		if err := n.Sync(klog.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	// What the priority controller reads: freezer, PID → pod, utilisation.
	f, err := cgroup.Detect(n.Tree.CgroupRoot)
	if err != nil {
		t.Fatal(err)
	}
	offDir, err := f.PodDir(offline)
	if err != nil {
		t.Fatal(err)
	}
	if uid, err := (cgroup.Procs{Root: n.Tree.ProcRoot}).PodUID(PID(online, 0)); err != nil || uid != online {
		t.Fatalf("PodUID = %q, %v", uid, err)
	}
	if got := util(t, fake, PID(online, 0)); got != 0 {
		t.Errorf("online util before the file = %d", got)
	}
	os.WriteFile(file, []byte("# comment\ndefault/on busy\ndefault/off 40\n"), 0o644)
	sync()
	if got := util(t, fake, PID(online, 0)); got != BusyUtil {
		t.Errorf("online util busy = %d", got)
	}
	if got := util(t, fake, PID(offline, 0)); got != 40 {
		t.Errorf("offline util = %d", got)
	}
	// A frozen pod stays frozen across an agent restart (a new Node).
	f.Freeze(offDir)
	n2, _ := New(fake, n.Tree.CgroupRoot, n.Tree.ProcRoot, file, n.Grants)
	n2.Sync(klog.Background())
	if frozen, _ := f.Frozen(offDir); !frozen {
		t.Error("a new Node thawed a frozen pod")
	}
	grants = grants[:1] // the offline pod is deleted
	sync()
	if _, err := os.Stat(offDir); !os.IsNotExist(err) {
		t.Errorf("offline cgroup still there: %v", err)
	}
	if got := util(t, fake, PID(offline, 0)); got != 255 {
		t.Errorf("offline process still on the card (util %d)", got)
	}
}

// util is pid's SM utilisation on card 0 (255: no such process).
func util(t *testing.T, fake *nvml.Fake, pid uint32) uint32 {
	t.Helper()
	dev, _ := fake.DeviceGetHandleByIndex(0)
	samples, ret := dev.GetProcessUtilization(0)
	if ret != gonvml.SUCCESS && ret != gonvml.ERROR_NOT_FOUND {
		t.Fatal(ret)
	}
	for _, s := range samples {
		if s.Pid == pid {
			return s.SmUtil
		}
	}
	return 255
}

func TestParseAndRoots(t *testing.T) {
	got, bad := parseActivity("a/b busy\nc/d idle\n e/f 7% \nbad line here\nx/y loud\n")
	if got["a/b"] != BusyUtil || got["c/d"] != 0 || got["e/f"] != 7 || len(got) != 3 || len(bad) != 2 {
		t.Errorf("got %v, bad %v", got, bad)
	}
	for _, r := range []string{"/sys/fs/cgroup", "/proc", "/"} {
		if CheckRoots(r) == nil {
			t.Errorf("CheckRoots(%s) accepted", r)
		}
	}
	if err := CheckRoots(t.TempDir()); err != nil {
		t.Error(err)
	}
}
