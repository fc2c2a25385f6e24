package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestAgentUninstall runs `qgpu-agent uninstall` as the agent of a node
// (its pod-bound token, the shipped RBAC and own-node policy) against a
// real apiserver after the node's agent stopped: refused, naming the pod,
// while a qGPU pod is bound there, and nothing removed; once the pod is
// gone it removes the store and the node's inventory annotation, and a
// second run is clean too. Another node's annotation stays.
func TestAgentUninstall(t *testing.T) {
	nodes, err := harness.ParseNodes("u1:1xT4,u2:1xT4")
	if err != nil {
		t.Fatal(err)
	}
	c := harness.StartTestCluster(t, harness.ClusterOptions{RBAC: true, Nodes: nodes})
	ctx := context.Background()
	pod := builders.GPUPod("held").Annotation(protocol.AnnotationUseGPUType, "T4").General("c", 2, 10).Obj()
	createPods(t, c.Client, pod)
	got, _ := waitBound(t, c.Client, "default", "held")
	e2eWaitGranted(t, c.Client, got)
	n := c.Node(got.Spec.NodeName)
	if err := n.Stop(); err != nil {
		t.Logf("stopping node %s: %v", n.Name, err)
	}
	bin, err := harness.BinaryPath("", "QGPU_AGENT_BIN", "qgpu-agent")
	if err != nil {
		t.Fatal(err)
	}
	dbfile := filepath.Join(n.RootDir, "meta.db")
	uninstall := func() (string, error) {
		out, err := exec.Command(bin, "uninstall", "--node-name="+n.Name, "--kubeconfig="+filepath.Join(n.RootDir, "agent.kubeconfig"),
			"--dbfile="+dbfile, "--device-plugin-dir="+filepath.Join(n.RootDir, "no-such-dir"), "--cdi-spec-dir=").CombinedOutput()
		return string(out), err
	}
	out, err := uninstall()
	if err == nil || !strings.Contains(out, "default/held") || !strings.Contains(out, "qGPU pods still run") {
		t.Fatalf("with a qGPU pod on the node: %v\n%s", err, out)
	}
	if _, err := os.Stat(dbfile); err != nil {
		t.Fatalf("the store is gone after a refusal: %v", err)
	}
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, "held", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	out, err = uninstall()
	if err != nil || !strings.Contains(out, "removed "+dbfile) || !strings.Contains(out, "removed annotation "+protocol.AnnotationInventory) {
		t.Fatalf("after the pod is gone: %v\n%s", err, out)
	}
	if _, err := os.Stat(dbfile); !os.IsNotExist(err) {
		t.Errorf("the store is still there: %v", err)
	}
	for _, name := range []string{"u1", "u2"} {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, has := node.Annotations[protocol.AnnotationInventory]
		if want := name != n.Name; has != want {
			t.Errorf("node %s has the inventory annotation: %v, want %v", name, has, want)
		}
	}
	if out, err := uninstall(); err != nil || !strings.Contains(out, "is clean (0 removed)") {
		t.Errorf("second run: %v\n%s", err, out)
	}
}
