package agent

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestRunPriorityController runs the whole agent with the priority controller
// on a fake cgroup tree: the grants in its store say which pods are online and
// offline on the card, the fake NVML scripts the online process; the offline
// pod is frozen while it is busy, the metrics show it, and shutdown thaws it.
func TestRunPriorityController(t *testing.T) {
	dir := t.TempDir()
	tree, err := cgroup.NewFakeTree(filepath.Join(dir, "host"), cgroup.V2, true)
	if err != nil {
		t.Fatal(err)
	}
	const online, offline = "aaaaaaaa-0000-0000-0000-000000000001", "bbbbbbbb-0000-0000-0000-000000000002"
	offPodDir, _ := tree.AddPod("besteffort", offline)
	offDir, _ := tree.AddContainer("besteffort", offline, "0ff1ce")   // its GPU container
	sideDir, _ := tree.AddContainer("besteffort", offline, "5idecar") // a sidecar without a grant
	tree.AddPod("burstable", online)
	tree.AddProc(100, "burstable", online)
	cards, _ := nvml.ParseFakeSpec("1xT4")
	fakeNVML := nvml.NewFake(cards, "n1", "")
	fakeNVML.SetProcess(0, 100, 0)
	db := filepath.Join(dir, "db", "meta.db")
	putGrants(t, db, fakeNVML.UUID(0), online, offline)

	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{protocol.LabelMixedEnable: "enable"}}}
	cfg := Config{
		NodeName: "n1", Client: fake.NewClientset(node, runningPod("online", online), runningPod("offline", offline)), NVML: fakeNVML, DBFile: db, DevicePluginDir: dir,
		Backend: "env", MetricsAddr: "127.0.0.1:0", HealthInterval: time.Hour, ReconcileInterval: time.Hour,
		PriorityController: true, CgroupRoot: tree.CgroupRoot, ProcRoot: tree.ProcRoot,
	}
	run := startAgent(t, cfg)
	addr := run.metrics
	freezer := &cgroup.Freezer{Root: tree.CgroupRoot, Version: cgroup.V2}
	frozen := func() bool { f, _ := freezer.Frozen(offDir); return f }

	fakeNVML.SetProcess(0, 100, 80)
	poll(t, "offline pod frozen", frozen)
	for _, dir := range []string{offPodDir, sideDir} {
		if f, _ := freezer.Frozen(dir); f {
			t.Errorf("%s frozen: only the GPU container may be", dir)
		}
	}
	// The controller counts a suspension once its freezer writes are done:
	// the metrics may trail the cgroup by a moment.
	for _, want := range []string{
		`qgpu_priority_suspensions_total{card="0",reason="online-busy",uuid="` + fakeNVML.UUID(0) + `"} 1`,
		`qgpu_priority_frozen_pods{card="0",uuid="` + fakeNVML.UUID(0) + `"} 1`,
	} {
		poll(t, "metrics show "+want, func() bool { return strings.Contains(get(t, "http://"+addr.String()+"/metrics"), want) })
	}
	run.stop(t) // the online pod is still busy
	if frozen() {
		t.Error("offline pod left frozen after the agent stopped")
	}
}

// runningPod is a pod of the node, so that the reconciler keeps its grants.
func runningPod(name, uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)},
		Spec: v1.PodSpec{NodeName: "n1", Containers: []v1.Container{{Name: "c"}, {Name: "sidecar"}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{
			{Name: "c", ContainerID: "containerd://0ff1ce"}, {Name: "sidecar", ContainerID: "containerd://5idecar"}}}}
}

func putGrants(t *testing.T, db, uuid, online, offline string) {
	t.Helper()
	st, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, g := range []store.Grant{
		{PodUID: online, Namespace: "default", Name: "online", Container: "c", Resource: protocol.ResourceMemory,
			Class: protocol.ClassOnline, Slices: []protocol.Slice{{UUID: uuid, MemoryGiB: 2}}},
		{PodUID: offline, Namespace: "default", Name: "offline", Container: "c", Resource: protocol.ResourceCoreGreedy,
			Class: protocol.ClassOffline, Slices: []protocol.Slice{{UUID: uuid, MemoryGiB: 2, Cores: 50}}},
	} {
		if err := st.Put(g); err != nil {
			t.Fatal(err)
		}
	}
}
