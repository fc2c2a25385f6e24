package fakeactivity

import (
	"os"
	"path/filepath"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		{PodUID: offline, Namespace: "default", Name: "off", Container: "c", Class: protocol.ClassOffline, Slices: []protocol.Slice{{Index: 0}}},
	}
	file := filepath.Join(dir, "activity")
	n, err := New(fake, filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc"), file,
		func() ([]store.Grant, error) { return grants, nil })
	if err != nil {
		t.Fatal(err)
	}
	// The offline pod's GPU container "c" runs; its sidecar has no grant.
	offPod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: offline}, Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{
		{Name: "c", ContainerID: "containerd://0ff1ce"}, {Name: "sidecar", ContainerID: "containerd://5ide"}}}}
	n.Pods = func() ([]*v1.Pod, error) { return []*v1.Pod{offPod}, nil }
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
	offPodDir, err := f.PodDir(offline)
	if err != nil {
		t.Fatal(err)
	}
	offDir, err := f.ContainerDir(offPodDir, "containerd://0ff1ce")
	if err != nil {
		t.Fatalf("the granted container's cgroup: %v", err)
	}
	if _, err := f.ContainerDir(offPodDir, "containerd://5ide"); err == nil {
		t.Error("a cgroup was made for the sidecar, which holds no grant")
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
	n2.Pods = n.Pods
	n2.Sync(klog.Background())
	if frozen, _ := f.Frozen(offDir); !frozen {
		t.Error("a new Node thawed a frozen pod")
	}
	grants = grants[:1] // the offline pod is deleted
	sync()
	if _, err := os.Stat(offPodDir); !os.IsNotExist(err) {
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
