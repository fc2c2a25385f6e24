package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/metrics"
	"github.com/qgpu-scheduler/qgpu/agent/mpsguard"
	"github.com/qgpu-scheduler/qgpu/agent/nodeconfig"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
)

type podList []*v1.Pod

func (p podList) Cached() ([]*v1.Pod, error) { return p, nil }

// mpsFixture is an MPS node's state as the guard reads it: a card whose
// server (pid 60) is a child of the daemon recorded in daemon.pid (pid 50),
// and a process (pid 300) of pod team/rogue on the card that is not.
type mpsFixture struct {
	lib            *nvml.Fake
	root, procRoot string
	pod            *v1.Pod
}

const roguePodUID = "0b7e3c1a-5d2f-4c8e-9a1b-2c3d4e5f6a7b"

func newMPSFixture(t *testing.T) mpsFixture {
	t.Helper()
	lib := nvml.NewFake([]nvml.FakeCard{{Model: "A100", MemoryMiB: 40960}}, "n1", "")
	root, procRoot := t.TempDir(), t.TempDir()
	card := filepath.Join(root, lib.UUID(0))
	writeFile(t, filepath.Join(card, enforce.MPSReadyFile), "")
	writeFile(t, filepath.Join(card, enforce.MPSDaemonPIDFile), "50\n")
	for pid, proc := range map[string]struct{ parent, cgroup string }{
		"50":  {"1", "0::/system.slice/containerd.service"},
		"60":  {"50", "0::/system.slice/containerd.service"}, // the card's server
		"300": {"1", "0::/kubepods.slice/kubepods-pod" + strings.ReplaceAll(roguePodUID, "-", "_") + ".slice/cri-containerd-abc.scope"},
	} {
		writeFile(t, filepath.Join(procRoot, pid, "stat"), pid+" (x) S "+proc.parent+" 1 0\n")
		writeFile(t, filepath.Join(procRoot, pid, "cgroup"), proc.cgroup+"\n")
	}
	lib.SetProcess(0, 60, 0)
	lib.SetProcess(0, 300, 0)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(roguePodUID), Namespace: "team", Name: "rogue"},
		Spec: v1.PodSpec{NodeName: "n1"}}
	return mpsFixture{lib: lib, root: root, procRoot: procRoot, pod: pod}
}

// waitRogueDeleted waits for the delete of team/rogue, with its UID as
// precondition, among the client's actions.
func waitRogueDeleted(t *testing.T, client *fake.Clientset) {
	t.Helper()
	var deleted k8stesting.DeleteActionImpl
	poll(t, "the pod of the process that bypasses MPS deleted", func() bool {
		for _, act := range client.Actions() {
			if d, ok := act.(k8stesting.DeleteActionImpl); ok && d.Resource.Resource == "pods" {
				deleted = d
				return true
			}
		}
		return false
	})
	if deleted.Namespace != "team" || deleted.Name != "rogue" || deleted.DeleteOptions.Preconditions == nil ||
		deleted.DeleteOptions.Preconditions.UID == nil || *deleted.DeleteOptions.Preconditions.UID != types.UID(roguePodUID) {
		t.Errorf("deleted %s/%s with %+v, want team/rogue with its UID as precondition", deleted.Namespace, deleted.Name, deleted.DeleteOptions)
	}
}

// TestMPSGuardWired: on an mps node with --mps-foreign-process-policy=evict
// the agent finds, through its NVML, --mps-root and --proc-root, a process
// on the MPS-shared card that is not a client of the card's server, and
// deletes its pod (UID precondition), with a Warning Event; the card's
// server, a child of the daemon recorded in daemon.pid, is left alone.
func TestMPSGuardWired(t *testing.T) {
	f := newMPSFixture(t)
	driver, err := nvml.Open(f.lib)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(f.pod)
	rec := record.NewFakeRecorder(10)
	a := &agent{cfg: Config{NodeName: "n1", Client: client, NVML: f.lib, MPSRoot: f.root, ProcRoot: f.procRoot,
		MPSForeignProcessPolicy: "evict", MPSForeignProcessPoll: 10 * time.Millisecond},
		recorder: rec, metrics: metrics.New()}
	nodeCfg := &nodeconfig.Config{Node: "n1", DefaultBackend: enforce.NameMPS, Options: enforce.Options{MPSRoot: f.root}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.startMPSGuard(ctx, driver, nodeCfg, podList{f.pod})

	waitRogueDeleted(t, client)
	select {
	case e := <-rec.Events:
		if !strings.HasPrefix(e, "Warning "+mpsguard.ReasonEvicted+" Process 300 ") {
			t.Errorf("event %q", e)
		}
	case <-time.After(30 * time.Second):
		t.Error("no event")
	}
}

// TestRunDRAMPSGuard: an MPS node serving the kubelet through DRA runs the
// same guard as one serving device plugins: the whole agent in DRA mode
// deletes the pod of a process that bypasses the card's MPS server.
func TestRunDRAMPSGuard(t *testing.T) {
	f := newMPSFixture(t)
	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins")
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	client := fake.NewClientset(f.pod, node)
	cfg := Config{
		NodeName: "n1", Client: client, NVML: f.lib, DBFile: filepath.Join(dir, "db", "meta.db"), DevicePluginDir: dir,
		Backend: enforce.NameMPS, MPSRoot: f.root, ProcRoot: f.procRoot, MetricsAddr: "127.0.0.1:0",
		HealthInterval: time.Hour, ReconcileInterval: time.Hour,
		MPSForeignProcessPolicy: "evict", MPSForeignProcessPoll: 10 * time.Millisecond,
		KubeletAPI: KubeletAPIDRA, KubeletPluginsDir: plugins, KubeletRegistryDir: filepath.Join(dir, "registry"),
		CDISpecDir: filepath.Join(dir, "cdi"), CDINodeSpecDirs: []string{filepath.Join(dir, "cdi")},
	}
	run := startAgent(t, cfg)
	waitRogueDeleted(t, client)
	run.stop(t)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
