package integration

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/agent/dra"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestDRAHollowNode: a hollow node with the kubelet's own DRA manager and
// the agent as its DRA kubelet plugin (harness NodeSpec.DRA, what test/chaos
// runs): the plugin registers through the kubelet's plugin watcher and
// publishes the node's cards, a claimed pod is placed there, the kubelet
// has the agent prepare its claim (the agent's checkpoint holds it) and
// the container is given the claim's CDI devices (the recorded
// environment names the card and the slice), and when the pod is deleted
// the kubelet has the claim unprepared.
func TestDRAHollowNode(t *testing.T) {
	nodes, err := harness.ParseNodes("t4-0:2xT4,dra-0:2xT4:dra")
	if err != nil {
		t.Fatal(err)
	}
	c := harness.StartTestCluster(t, harness.ClusterOptions{Nodes: nodes, RBAC: true,
		APIServerFlags: []string{"--feature-gates=DRAConsumableCapacity=true"}})
	ctx := context.Background()
	objs, err := harness.ReadManifests("manifests/dra")
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Apply(ctx, c.Config, objs, false); err != nil {
		t.Fatal(err)
	}
	cs := c.Client
	createClaims(t, cs, draClaim("hollow", protocol.ClassGeneral, 4, 30))
	createPods(t, cs, draPod("hollow", "hollow"))
	pod, a := waitBound(t, cs, "default", "hollow")
	if pod.Spec.NodeName != "dra-0" {
		t.Fatalf("claimed pod bound to %s, want the DRA node dra-0", pod.Spec.NodeName)
	}
	if err := waitForPodRunning(ctx, cs, "default", "hollow"); err != nil {
		t.Fatal(err)
	}
	node := c.Node("dra-0")
	checkpoint := filepath.Join(node.RootDir, "kubelet", "plugins", protocol.DRADriver, dra.DefaultCheckpointName)
	claim := allocatedClaim(t, cs, "hollow")
	if !checkpointHolds(t, checkpoint, string(claim.UID)) {
		t.Fatalf("the agent's checkpoint %s does not hold the running pod's claim %s", checkpoint, claim.UID)
	}
	env, err := node.ContainerEnv("default", "hollow", "main")
	if err != nil {
		t.Fatal(err)
	}
	s := a.Containers[0].Slices[0]
	if env["NVIDIA_VISIBLE_DEVICES"] != s.UUID || env["QGPU_MEMORY_GIB"] != "4" || env["QGPU_CORES"] != "30" {
		t.Errorf("the claimed container was given %v, want card %s with 4 GiB and 30 cores", env, s.UUID)
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, "hollow", *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return !checkpointHolds(t, checkpoint, string(claim.UID)), nil
	})
	if err != nil {
		t.Errorf("the deleted pod's claim is still prepared on its node (checkpoint %s)", checkpoint)
	}
}

// checkpointHolds reports whether the agent's DRA checkpoint lists the
// claim with UID uid.
func checkpointHolds(t *testing.T, path, uid string) bool {
	t.Helper()
	prepared, err := dra.Checkpoint{Path: path}.Load()
	if err != nil {
		t.Fatalf("checkpoint %s: %v", path, err)
	}
	_, ok := prepared[types.UID(uid)]
	return ok
}
