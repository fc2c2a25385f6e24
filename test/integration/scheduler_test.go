package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

const (
	t4MiB   = 15109 // 14 GiB
	v100MiB = 32510 // 31 GiB
)

// TestSchedulerPlacesSeedPods runs the real qgpu-scheduler binary with the
// default profile against a real apiserver and places the example pods of Tencent qGPU's documentation.
func TestSchedulerPlacesSeedPods(t *testing.T) {
	cp := harness.Start(t)
	harness.StartQGPUScheduler(t, cp, "config/qgpu-scheduler.yaml")
	cs := cp.Client
	createNodes(t, cs,
		builders.GPUNode("t4", false, builders.Cards(2, "Tesla-T4", t4MiB)),
		builders.GPUNode("v100-mixed", true, builders.Cards(2, "Tesla-V100-SXM2-32GB", v100MiB)),
	)
	type want struct {
		Node  string
		Cards []int
	}
	cases := []struct {
		pod  *corev1.Pod
		want want
	}{
		// Tencent qGPU on TKE: a general pod with 5 GiB and 30 cores; binpack picks a node
		// and its first card.
		{builders.GPUPod("general-5g").Annotation(protocol.AnnotationUseGPUType, "t4").General("c", 5, 30).Obj(), want{"t4", []int{0}}},
		// Binpack onto the same card.
		{builders.GPUPod("general-4g").Annotation(protocol.AnnotationUseGPUType, "t4").General("c", 4, 30).Obj(), want{"t4", []int{0}}},
		// Tencent qGPU co-location: offline pods are packed on cards without online pods.
		{builders.GPUPod("offline-a").Offline("c", 8, 50).Obj(), want{"v100-mixed", []int{0}}},
		{builders.GPUPod("offline-b").Offline("c", 8, 50).Obj(), want{"v100-mixed", []int{0}}},
		// Online pods prefer the card without offline pods.
		{builders.GPUPod("online-a").Online("c", 10).Obj(), want{"v100-mixed", []int{1}}},
		// A whole card (C = 100) on the T4 node: only card 1 is empty.
		{builders.GPUPod("whole").General("c", 10, 100).Obj(), want{"t4", []int{1}}},
	}
	for _, c := range cases {
		createPods(t, cs, c.pod)
		_, a := waitBound(t, cs, c.pod.Namespace, c.pod.Name)
		var got []int
		for _, s := range a.Containers[0].Slices {
			got = append(got, s.Index)
		}
		if diff := cmp.Diff(c.want, want{a.Node, got}); diff != "" {
			t.Errorf("pod %s placed wrongly (-want +got):\n%s", c.pod.Name, diff)
		}
	}
	checkCluster(t, cs)
}

// Each rejection stays Pending with a FailedScheduling reason that names the
// rule and the value, and changes nothing else.
func TestSchedulerRejections(t *testing.T) {
	cp := harness.Start(t)
	harness.StartQGPUScheduler(t, cp, "config/qgpu-scheduler.yaml")
	cs := cp.Client
	createNodes(t, cs, builders.GPUNode("t4", false, builders.Cards(2, "Tesla-T4", t4MiB)))
	cases := []struct {
		pod  *corev1.Pod
		want string
	}{
		{builders.GPUPod("core-150").General("c", 2, 150).Obj(), "tke.cloud.tencent.com/qgpu-core: value 150 above 100 must be a multiple of 100"},
		{builders.GPUPod("online-cores").Class(protocol.ClassOnline).General("c", 2, 10).Obj(), "online pods ask for tke.cloud.tencent.com/qgpu-memory only"},
		{builders.GPUPod("greedy-101").Offline("c", 2, 101).Obj(), "tke.cloud.tencent.com/qgpu-core-greedy: value 101 must be between 1 and 100"},
		// 28 GiB on the node, but no card has 15.
		{builders.GPUPod("too-big").General("c", 15, 10).Obj(), "insufficient qGPU card memory, cores or pod slots"},
		// More than the node has at all: QGPU's Filter runs first (the
		// profiles order it so), before NodeResourcesFit.
		{builders.GPUPod("too-big-node").General("c", 29, 10).Obj(), "insufficient qGPU card memory, cores or pod slots"},
		{builders.GPUPod("online-not-mixed").Online("c", 2).Obj(), "node is not enabled for online/offline pods"},
		{builders.GPUPod("model").Annotation(protocol.AnnotationUseGPUType, "A100").General("c", 2, 10).Obj(), "no card of the requested GPU model"},
	}
	createPods(t, cs, builders.GPUPod("ok").General("c", 2, 10).Obj())
	waitBound(t, cs, "default", "ok")
	for _, c := range cases {
		createPods(t, cs, c.pod)
	}
	for _, c := range cases {
		msg := waitFailedScheduling(t, cs, "default", c.pod.Name)
		if !strings.Contains(msg, c.want) {
			t.Errorf("pod %s: FailedScheduling %q does not contain %q", c.pod.Name, msg, c.want)
		}
		t.Logf("%s: %s", c.pod.Name, msg)
	}
	c := checkCluster(t, cs)
	if got := c.Nodes[0].Cards[0].UsedMemoryGiB; got != 2 {
		t.Fatalf("rejected pods changed the ledger: card holds %d GiB, want 2", got)
	}
}

// A scheduler killed midway (SIGKILL) and restarted rebuilds its ledger from
// the assignments and still never oversubscribes a card.
func TestSchedulerRestartRebuildsLedger(t *testing.T) {
	cp := harness.Start(t)
	cs := cp.Client
	// Two V100 cards of 31 GiB: 7 pods of 4 GiB each by memory and by Mc/4.
	createNodes(t, cs, builders.GPUNode("n1", false, builders.Cards(1, "V100", v100MiB)),
		builders.GPUNode("n2", false, builders.Cards(1, "V100", v100MiB)))
	pod := func(i int) *corev1.Pod { return builders.GPUPod(fmt.Sprintf("p%02d", i)).General("c", 4, 10).Obj() }
	first := harness.StartQGPUScheduler(t, cp, "config/qgpu-scheduler.yaml")
	for i := range 8 {
		createPods(t, cs, pod(i))
	}
	for i := range 8 {
		waitBound(t, cs, "default", pod(i).Name)
	}
	first.Kill()
	harness.StartQGPUScheduler(t, cp, "config/qgpu-scheduler.yaml")
	for i := 8; i < 20; i++ {
		createPods(t, cs, pod(i))
	}
	// Six of the twelve fit beside the eight the rebuilt ledger holds. Which
	// six is the scheduler's choice: the new leader finds them all queued
	// at once, and from 1.35 its queue does not take pods of one priority
	// listed together in creation order.
	var unbound []string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		unbound = unbound[:0]
		for i := 8; i < 20; i++ {
			p, err := cs.CoreV1().Pods("default").Get(ctx, pod(i).Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Spec.NodeName == "" {
				unbound = append(unbound, p.Name)
			}
		}
		return len(unbound) <= 6, nil
	})
	if err != nil || len(unbound) != 6 {
		t.Fatalf("after the restart %d of 12 new pods unbound, want 6: %v", len(unbound), err)
	}
	for _, name := range unbound {
		// The rebuilt ledger turns them away (QGPU's Filter runs first).
		if msg := waitFailedScheduling(t, cs, "default", name); !strings.Contains(msg, "2 insufficient qGPU card memory, cores or pod slots") {
			t.Errorf("pod %s: %s", name, msg)
		}
	}
	c := checkCluster(t, cs)
	for _, n := range c.Nodes {
		if n.Cards[0].Pods() != 7 {
			t.Errorf("node %s holds %d pods, want 7", n.Name, n.Cards[0].Pods())
		}
	}
	pods, _ := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	bound := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	if bound != 14 {
		t.Fatalf("%d pods bound, want 14", bound)
	}
}
