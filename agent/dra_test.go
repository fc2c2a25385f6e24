package agent

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/dra"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestValidateDRA: the DRA mode's flags are checked before anything
// starts, each error naming its flag and value.
func TestValidateDRA(t *testing.T) {
	base := func() Config {
		return Config{NodeName: "n", Client: fake.NewClientset(), NVML: nvml.NewFake(nil, "n", ""), Backend: "env",
			DBFile: "/tmp/db", DevicePluginDir: "/dp", HealthInterval: 1, ReconcileInterval: 1,
			KubeletPluginsDir: "/var/lib/kubelet/plugins", KubeletRegistryDir: "/var/lib/kubelet/plugins_registry", CDISpecDir: "/var/run/cdi"}
	}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"device plugins by default", func(*Config) {}, ""},
		{"device plugins named", func(c *Config) { c.KubeletAPI = KubeletAPIDevicePlugins }, ""},
		{"dra", func(c *Config) { c.KubeletAPI = KubeletAPIDRA }, ""},
		{"unknown API", func(c *Config) { c.KubeletAPI = "csi" }, `--kubelet-api "csi": must be device-plugins or dra`},
		{"relative plugins dir", func(c *Config) { c.KubeletAPI = KubeletAPIDRA; c.KubeletPluginsDir = "plugins" }, `--kubelet-plugins-dir "plugins": must be an absolute path`},
		{"no CDI spec dir", func(c *Config) { c.KubeletAPI = KubeletAPIDRA; c.CDISpecDir = "" }, `--cdi-spec-dir "": must be an absolute path`},
		{"relative dirs ignored without DRA", func(c *Config) { c.KubeletRegistryDir = "x" }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(&c)
			err := c.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
	c := base()
	if got := c.checkpointPath(); got != "/var/lib/kubelet/plugins/gpu.qgpu.io/checkpoint.json" {
		t.Errorf("default checkpoint %q", got)
	}
}

// TestRunDRAPriorityController runs the whole agent in DRA mode with the
// priority controller on a fake cgroup tree: two prepared claims (online
// and offline, from the checkpoint of a previous run) used by two pods'
// containers; the offline pod's GPU container is frozen while the online
// pod is busy, its sidecar never, and shutdown thaws it. The controller
// learns the classes from the prepared claims and the pods alone: the
// store holds no grant.
func TestRunDRAPriorityController(t *testing.T) {
	dir := t.TempDir()
	tree, err := cgroup.NewFakeTree(filepath.Join(dir, "host"), cgroup.V2, true)
	if err != nil {
		t.Fatal(err)
	}
	const online, offline = "aaaaaaaa-0000-0000-0000-000000000001", "bbbbbbbb-0000-0000-0000-000000000002"
	tree.AddPod("besteffort", offline)
	offDir, _ := tree.AddContainer("besteffort", offline, "0ff1ce")
	sideDir, _ := tree.AddContainer("besteffort", offline, "5idecar")
	tree.AddPod("burstable", online)
	tree.AddProc(100, "burstable", online)
	cards, _ := nvml.ParseFakeSpec("1xT4")
	fakeNVML := nvml.NewFake(cards, "n1", "")
	fakeNVML.SetProcess(0, 100, 0)

	plugins := filepath.Join(dir, "plugins")
	var objs []runtime.Object
	prepared := map[types.UID]dra.Prepared{}
	for _, c := range []struct {
		pod, uid string
		class    protocol.Class
		cores    int64
	}{{"online", online, protocol.ClassOnline, 0}, {"offline", offline, protocol.ClassOffline, 50}} {
		claimUID := types.UID("claim-" + c.pod)
		objs = append(objs, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: c.pod, UID: claimUID}})
		prepared[claimUID] = dra.Prepared{UID: claimUID, Namespace: "default", Name: c.pod, Requests: []dra.PreparedRequest{{
			Request: dra.Request{Name: "gpu", Class: c.class, Devices: []string{"gpu-0"},
				Slices: []protocol.Slice{{Index: 0, UUID: fakeNVML.UUID(0), MemoryGiB: 2, Cores: c.cores}}},
			SpecDevice: string(claimUID) + "_gpu", CardDevices: []string{"nvidia.com/gpu=" + fakeNVML.UUID(0)}}}}
		pod := runningPod(c.pod, c.uid)
		pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "g", ResourceClaimName: ptr.To(c.pod)}}
		pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "g"}}
		objs = append(objs, pod)
	}
	if err := (dra.Checkpoint{Path: filepath.Join(dra.DriverDir(plugins), dra.DefaultCheckpointName)}).Save(prepared); err != nil {
		t.Fatal(err)
	}
	objs = append(objs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{protocol.LabelMixedEnable: "enable"}}})
	cfg := Config{
		NodeName: "n1", Client: fake.NewClientset(objs...), NVML: fakeNVML, DBFile: filepath.Join(dir, "db", "meta.db"), DevicePluginDir: dir,
		Backend: "env", MetricsAddr: "127.0.0.1:0", HealthInterval: time.Hour, ReconcileInterval: time.Hour,
		PriorityController: true, CgroupRoot: tree.CgroupRoot, ProcRoot: tree.ProcRoot,
		KubeletAPI: KubeletAPIDRA, KubeletPluginsDir: plugins, KubeletRegistryDir: filepath.Join(dir, "registry"),
		CDISpecDir: filepath.Join(dir, "cdi"), CDINodeSpecDirs: []string{filepath.Join(dir, "cdi")},
	}
	run := startAgent(t, cfg)
	ctx := run.ctx
	// The inventory stays: the scheduler's ledger counts claimed slices on it.
	poll(t, "inventory published", func() bool {
		n, err := cfg.Client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		return err == nil && n.Annotations[protocol.AnnotationInventory] != ""
	})
	freezer := &cgroup.Freezer{Root: tree.CgroupRoot, Version: cgroup.V2}
	frozen := func() bool { f, _ := freezer.Frozen(offDir); return f }
	fakeNVML.SetProcess(0, 100, 80)
	poll(t, "offline DRA pod frozen", frozen)
	if f, _ := freezer.Frozen(sideDir); f {
		t.Error("the sidecar, which uses no claim, is frozen")
	}
	run.stop(t)
	if frozen() {
		t.Error("offline pod left frozen after the agent stopped")
	}
}

// listedPods is an allocate.PodSource over two lists.
type listedPods struct{ cached, fresh []*v1.Pod }

func (l listedPods) Cached() ([]*v1.Pod, error)               { return l.cached, nil }
func (l listedPods) Fresh(context.Context) ([]*v1.Pod, error) { return l.fresh, nil }

// TestDeviceGrants: the claims' capacity check counts the device
// plugins' grants of the pods that have not terminated, from the
// informer's list or a fresh one; a node with no grant lists no pod.
func TestDeviceGrants(t *testing.T) {
	grant := func(uid string) store.Grant { return store.Grant{PodUID: uid, Resource: protocol.ResourceMemory} }
	done := runningPod("done", "u-done")
	done.Status.Phase = v1.PodSucceeded
	pods := listedPods{cached: []*v1.Pod{runningPod("a", "u-a"), runningPod("b", "u-b"), done}, fresh: []*v1.Pod{runningPod("b", "u-b")}}
	stored := []store.Grant{grant("u-a"), grant("u-b"), grant("u-done"), grant("u-gone")}
	list := deviceGrants(func() ([]store.Grant, error) { return stored, nil }, pods)
	uids := func(fresh bool) []string {
		got, err := list(context.Background(), fresh)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, g := range got {
			out = append(out, g.PodUID)
		}
		return out
	}
	if diff := cmp.Diff([]string{"u-a", "u-b"}, uids(false)); diff != "" {
		t.Errorf("from the cache (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"u-b"}, uids(true)); diff != "" {
		t.Errorf("fresh (-want +got):\n%s", diff)
	}
	none := deviceGrants(func() ([]store.Grant, error) { return nil, nil }, nil) // a nil source would panic if asked
	if got, err := none(context.Background(), true); err != nil || len(got) != 0 {
		t.Errorf("no grant: %v, %v", got, err)
	}
}
