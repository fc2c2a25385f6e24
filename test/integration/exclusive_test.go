package integration

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestNodeExclusive runs T9k's node-exclusive pods
// (tensorstack.dev/nvidia-gpu-node: 1) with the real scheduler binary, real
// hollow kubelets and real agents on two T9k nodes (docs/node-exclusive.md):
//
//  1. It arrives first: it holds every card of its node whole, its container
//     sees every card (NVIDIA_VISIBLE_DEVICES=all), and a native qGPU pod
//     and a T9k percent pod pinned to its node stay Pending with the cards
//     full, while an unpinned GPU pod goes to the other node.
//  2. It arrives second: with a GPU pod on each node, a second
//     node-exclusive pod stays Pending (`node has pods that ask for GPU`)
//     and lands on the other node only once that node's GPU pod is gone.
//  3. The first node-exclusive pod ends: the pods pinned to its node land.
func TestNodeExclusive(t *testing.T) {
	t9k := map[string]string{vocab.Label(vocab.T9k): protocol.LabelValueEnable}
	c := harness.StartTestCluster(t, harness.ClusterOptions{RBAC: true, Nodes: []harness.NodeSpec{
		{Name: "t9k-0", Cards: "2xT4", Labels: t9k},
		{Name: "t9k-1", Cards: "2xT4", Labels: t9k},
	}})
	cs := c.Client

	// 1. The node-exclusive pod first.
	excl := exclusivePod("excl")
	createPods(t, cs, excl)
	got, a := waitBound(t, cs, "default", excl.Name)
	e2eWaitGranted(t, cs, got)
	held := a.Node
	other := map[string]string{"t9k-0": "t9k-1", "t9k-1": "t9k-0"}[held]
	checkHoldsEveryCard(t, c, got.Name, a)

	pinned := []*corev1.Pod{
		pinTo(builders.GPUPod("native-pinned").General("c", 1, 10).Obj(), held),
		pinTo(builders.GPUPod("t9k-pinned").Container("c", map[string]int64{vocab.T9kGPUPercent: 30}).Obj(), held),
	}
	for _, p := range pinned {
		createPods(t, cs, p)
		msg := waitFailedScheduling(t, cs, "default", p.Name)
		if !strings.Contains(msg, placement.ReasonCardsFull) {
			t.Errorf("pod %s pinned to %s held by %s: FailedScheduling %q does not say the cards are full", p.Name, held, excl.Name, msg)
		}
		t.Logf("%s: %s", p.Name, msg)
	}
	native := builders.GPUPod("native").General("c", 1, 10).Obj()
	createPods(t, cs, native)
	if got, a := waitBound(t, cs, "default", native.Name); a.Node != other {
		t.Fatalf("GPU pod %s on %s, want %s (%s is held by %s)", native.Name, a.Node, other, held, excl.Name)
	} else {
		e2eWaitGranted(t, cs, got)
	}

	// 2. The node-exclusive pod second: both nodes have GPU pods.
	excl2 := exclusivePod("excl-2")
	createPods(t, cs, excl2)
	if msg := waitFailedScheduling(t, cs, "default", excl2.Name); !strings.Contains(msg, "2 "+qgpu.ReasonNodeNotEmpty) {
		t.Errorf("pod %s: FailedScheduling %q does not say both nodes have GPU pods", excl2.Name, msg)
	} else {
		t.Logf("%s: %s", excl2.Name, msg)
	}
	deletePods(t, c, native.Name)
	got, a = waitBound(t, cs, "default", excl2.Name)
	if a.Node != other {
		t.Fatalf("pod %s on %s, want %s (freed by %s)", excl2.Name, a.Node, other, native.Name)
	}
	e2eWaitGranted(t, cs, got)
	checkHoldsEveryCard(t, c, got.Name, a)
	for _, p := range pinned {
		if p, err := cs.CoreV1().Pods("default").Get(context.Background(), p.Name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
			t.Fatalf("pod %s bound to %q (%v) while %s holds the node", p.Name, p.Spec.NodeName, err, excl.Name)
		}
	}

	// 3. The first node-exclusive pod ends: its node takes the pinned pods.
	deletePods(t, c, excl.Name)
	for _, p := range pinned {
		got, a := waitBound(t, cs, "default", p.Name)
		if a.Node != held {
			t.Errorf("pod %s on %s, want %s", p.Name, a.Node, held)
		}
		e2eWaitGranted(t, cs, got)
	}
	checkCluster(t, cs)
}

// exclusivePod is T9k's node-exclusive pod: one container asking for
// tensorstack.dev/nvidia-gpu-node: 1.
func exclusivePod(name string) *corev1.Pod {
	return builders.GPUPod(name).Container("main", map[string]int64{vocab.T9kGPUNode: 1}).Obj()
}

func pinTo(p *corev1.Pod, node string) *corev1.Pod {
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	return p
}

// checkHoldsEveryCard checks that the node-exclusive pod's one container
// holds every card of its node whole (all memory, 100 cores) and sees them
// all: NVIDIA_VISIBLE_DEVICES=all (docs/vocabularies.md).
func checkHoldsEveryCard(t *testing.T, c *harness.Cluster, pod string, a *protocol.Assignment) {
	t.Helper()
	cards := inventoryCards(t, c, a.Node)
	if len(a.Containers) != 1 || len(a.Containers[0].Slices) != len(cards) {
		t.Fatalf("pod %s on %s: assignment %+v, want one container holding all %d cards", pod, a.Node, a.Containers, len(cards))
	}
	ca := a.Containers[0]
	for _, s := range ca.Slices {
		card, ok := cards[s.Index]
		if !ok || s.UUID != card.UUID || s.MemoryGiB != card.MemoryGiB() || s.Cores != protocol.CoresPerCard {
			t.Errorf("pod %s on %s: slice %+v, want card %d whole (%+v)", pod, a.Node, s, s.Index, card)
		}
	}
	env, err := c.Node(a.Node).ContainerEnv("default", pod, ca.Name)
	if err != nil {
		t.Fatal(err)
	}
	if env["NVIDIA_VISIBLE_DEVICES"] != "all" {
		t.Errorf("pod %s container %s: NVIDIA_VISIBLE_DEVICES=%q, want all (env %v)", pod, ca.Name, env["NVIDIA_VISIBLE_DEVICES"], env)
	}
}
