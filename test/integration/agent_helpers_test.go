package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

const (
	qgpuMemory     corev1.ResourceName = protocol.ResourceMemory
	qgpuCore       corev1.ResourceName = protocol.ResourceCore
	qgpuCoreGreedy corev1.ResourceName = protocol.ResourceCoreGreedy
	agentWait                          = 60 * time.Second
)

// agentCredentials applies the agent's real RBAC manifest and returns a
// kubeconfig of its ServiceAccount: the agent runs with exactly the rights
// its DaemonSet gets (a node's own identity may not patch pods).
func agentCredentials(t *testing.T, cp *harness.ControlPlane) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	objs, err := harness.ReadManifests("manifests/namespace.yaml", "manifests/agent/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Apply(ctx, cp.Config, objs, false); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "agent.kubeconfig")
	if err := cp.KubeconfigForServiceAccount(ctx, "qgpu-system", "qgpu-agent", path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startAgentNode starts a hollow node whose agent child is the real
// bin/qgpu-agent with fake cards (an --fake-cards spec), its store in the
// node's root dir and the hollow kubelet's PodResources socket, and waits
// until the device plugins put the cards into the node's capacity.
func startAgentNode(t *testing.T, cp *harness.ControlPlane, kubeconfig, name, cards string, mixed bool) *harness.HollowNode {
	t.Helper()
	root := t.TempDir()
	return startAgentNodeIn(t, cp, kubeconfig, name, cards, mixed, root, kubeletPodResources(root))
}

// kubeletPodResources is the hollow kubelet's PodResources socket under root.
func kubeletPodResources(root string) string {
	return filepath.Join(root, "kubelet", "pod-resources", "kubelet.sock")
}

// startAgentNodeIn is startAgentNode in root, the agent asking the
// PodResources API on podResources.
func startAgentNodeIn(t *testing.T, cp *harness.ControlPlane, kubeconfig, name, cards string, mixed bool, root, podResources string) *harness.HollowNode {
	t.Helper()
	agent, err := harness.BinaryPath("", "QGPU_AGENT_BIN", "qgpu-agent")
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{protocol.LabelDeviceEnable: protocol.LabelValueEnable}
	if mixed {
		labels[protocol.LabelMixedEnable] = protocol.LabelValueEnable
	}
	return harness.StartNode(t, cp, harness.HollowNodeOptions{
		Name: name, RootDir: root, Labels: labels, AgentCmd: agent,
		AgentArgs: []string{
			"--kubeconfig=" + kubeconfig,
			"--fake-cards=" + cards,
			"--dbfile=" + filepath.Join(root, "qgpu", "meta.db"),
			"--pod-resources-socket=" + podResources,
			"--metrics-addr=127.0.0.1:0",
			"--reconcile-interval=1s",
			"-v=2",
		},
	})
}

// waitAgentCapacity waits for the capacity of cards cards of gib GiB each.
func waitAgentCapacity(t *testing.T, cs kubernetes.Interface, n *harness.HollowNode, cards, gib int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), agentWait)
	defer cancel()
	for r, q := range map[corev1.ResourceName]int64{qgpuMemory: cards * gib, qgpuCore: 100 * cards, qgpuCoreGreedy: 100 * cards} {
		if err := n.WaitForCapacity(ctx, cs, r, q); err != nil {
			t.Fatal(err)
		}
	}
}

// runQGPUPod creates pod, waits until qgpu-scheduler bound it and the
// kubelet runs it, checks every container's device-plugin environment
// against the assignment and waits for the agent's grant, which must equal
// the assignment.
func runQGPUPod(t *testing.T, cs kubernetes.Interface, node *harness.HollowNode, pod *corev1.Pod) *protocol.Assignment {
	t.Helper()
	createPods(t, cs, pod)
	got, a := waitBound(t, cs, pod.Namespace, pod.Name)
	if got.Spec.NodeName != node.Name {
		t.Fatalf("pod %s bound to %s, want %s", pod.Name, got.Spec.NodeName, node.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), agentWait)
	defer cancel()
	if err := waitForPodRunning(ctx, cs, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	for _, c := range a.Containers {
		if diff := envDiff(t, node, got, c, a.Class); diff != "" {
			t.Errorf("pod %s container %s: env differs from the assignment (-want +got):\n%s", pod.Name, c.Name, diff)
		}
	}
	if diff := cmp.Diff(a, waitGrant(t, cs, pod.Namespace, pod.Name)); diff != "" {
		t.Errorf("pod %s: grant differs from the assignment (-assignment +grant):\n%s", pod.Name, diff)
	}
	return a
}

// envDiff compares the container's recorded environment with what the env
// backend must derive from slice c (agent/enforce/README.md).
func envDiff(t *testing.T, node *harness.HollowNode, pod *corev1.Pod, c protocol.ContainerAssignment, class protocol.Class) string {
	t.Helper()
	env, err := node.ContainerEnv(pod.Namespace, pod.Name, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	return cmp.Diff(wantEnv(c, class), env)
}

func wantEnv(c protocol.ContainerAssignment, class protocol.Class) map[string]string {
	var uuids, indexes []string
	for _, s := range c.Slices {
		uuids, indexes = append(uuids, s.UUID), append(indexes, strconv.Itoa(s.Index))
	}
	mem, cores := c.Total()
	want := map[string]string{
		"NVIDIA_VISIBLE_DEVICES": strings.Join(uuids, ","),
		"QGPU_CARD_INDEX":        strings.Join(indexes, ","),
		"QGPU_MEMORY_GIB":        strconv.FormatInt(mem, 10),
		"QGPU_CLASS":             string(class),
		"QGPU_POLICY":            string(protocol.DefaultPolicy),
	}
	if class != protocol.ClassOnline {
		want["QGPU_CORES"] = strconv.FormatInt(cores, 10)
	}
	return want
}

// waitGrant waits for the agent's qgpu.io/grant annotation on the pod.
func waitGrant(t *testing.T, cs kubernetes.Interface, ns, name string) *protocol.Assignment {
	t.Helper()
	var raw string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, agentWait, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		raw = p.Annotations[protocol.AnnotationGrant]
		return raw != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: no %s annotation in %v", ns, name, protocol.AnnotationGrant, agentWait)
	}
	g, err := protocol.DecodeAssignment([]byte(raw))
	if err != nil {
		t.Fatalf("pod %s/%s: invalid grant %q: %v", ns, name, raw, err)
	}
	return g
}

// podEvents returns the messages of the pod's events with reason.
func podEvents(t *testing.T, cs kubernetes.Interface, ns, name, reason string) []string {
	t.Helper()
	sel := fields.Set{"involvedObject.name": name, "reason": reason}.String()
	evs, err := cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, fmt.Sprintf("%s (x%d)", e.Message, e.Count))
	}
	return out
}
