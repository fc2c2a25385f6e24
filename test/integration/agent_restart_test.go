package integration

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestAgentRestarts kills the agent (SIGKILL) between Allocate calls and
// restarts the kubelet's device manager; after each, the agent registers
// again, a new pod is allocated its own slice, and the earlier grants stand.
func TestAgentRestarts(t *testing.T) {
	cp := harness.StartWith(t, harness.ControlPlaneOptions{RBAC: true})
	harness.StartQGPUScheduler(t, cp, "config/qgpu-scheduler.yaml")
	cs := cp.Client
	node := startAgentNode(t, cp, agentCredentials(t, cp), "t4", "2xT4", false)
	waitAgentCapacity(t, cs, node, 2, 14)
	assigned := map[string]*protocol.Assignment{}
	run := func(t *testing.T, name string) {
		assigned[name] = runQGPUPod(t, cs, node, builders.GPUPod(name).General("c", 4, 30).Obj())
	}
	run(t, "first")

	t.Run("agent killed", func(t *testing.T) {
		if err := node.RestartAgent(); err != nil {
			t.Fatal(err)
		}
		waitRegistrations(t, node, 2)
		run(t, "second")
		checkGrantsStand(t, cs, assigned)
	})
	t.Run("kubelet restart", func(t *testing.T) {
		if err := node.RestartDeviceManager(); err != nil {
			t.Fatal(err)
		}
		waitRegistrations(t, node, 3)
		waitAgentCapacity(t, cs, node, 2, 14)
		run(t, "third")
		checkGrantsStand(t, cs, assigned)
	})
	t.Run("store", func(t *testing.T) {
		// The store is locked while the agent runs: stop the node (and agent) first.
		if err := node.Stop(); err != nil {
			t.Fatal(err)
		}
		checkStore(t, filepath.Join(node.RootDir, "qgpu", "meta.db"), assigned)
	})
	checkCluster(t, cs)
}

// waitRegistrations waits for the agent's n-th registration with the kubelet.
func waitRegistrations(t *testing.T, node *harness.HollowNode, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), agentWait)
	defer cancel()
	start := time.Now()
	if err := waitForLogCount(ctx, node.AgentLogPath(), "Device plugins registered", n); err != nil {
		t.Fatal(err)
	}
	t.Logf("agent registered (%d) after %v", n, time.Since(start).Round(time.Millisecond))
}

// checkGrantsStand checks that every pod's grant still equals its
// assignment, and that no reconcile pass found anything to correct.
func checkGrantsStand(t *testing.T, cs kubernetes.Interface, assigned map[string]*protocol.Assignment) {
	t.Helper()
	for name, a := range assigned {
		if diff := cmp.Diff(a, waitGrant(t, cs, "default", name)); diff != "" {
			t.Errorf("pod %s: grant changed (-assignment +grant):\n%s", name, diff)
		}
		for _, reason := range []string{"QGPUGrantRewritten", "QGPUGrantMismatch", "QGPUUnrecordedDevices", "QGPUGrantRecovered"} {
			if evs := podEvents(t, cs, "default", name, reason); len(evs) > 0 {
				t.Errorf("pod %s: %s events %q", name, reason, evs)
			}
		}
	}
}

// checkStore reads the stopped agent's store: one record per (container,
// resource) of every pod, holding the pod's assigned slices, and no device
// ID handed out twice.
func checkStore(t *testing.T, path string, assigned map[string]*protocol.Assignment) {
	t.Helper()
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	grants, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]sets.Set[string]{}
	records := map[string]int{}
	for _, g := range grants {
		records[g.Name]++
		a := assigned[g.Name]
		if a == nil || g.PodUID != a.PodUID || !cmp.Equal(a.Containers[0].Slices, g.Slices) {
			t.Errorf("record %s/%s %s: %+v does not match the assignment %v", g.Name, g.Container, g.Resource, g, a)
		}
		if seen[g.Resource] == nil {
			seen[g.Resource] = sets.New[string]()
		}
		if dup := seen[g.Resource].Intersection(sets.New(g.DeviceIDs...)); dup.Len() > 0 {
			t.Errorf("devices %v of %s handed out twice (again to %s)", sets.List(dup), g.Resource, g.Name)
		}
		seen[g.Resource].Insert(g.DeviceIDs...)
	}
	for name := range assigned {
		if records[name] != 2 {
			t.Errorf("pod %s: %d records, want 2 (memory and core)", name, records[name])
		}
	}
}
