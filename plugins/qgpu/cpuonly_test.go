package qgpu

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/args"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// plainNode is a node without qGPU cards.
func plainNode(name string) *v1.Node {
	n := builders.GPUNode(name, false, nil)
	delete(n.Labels, protocol.LabelDeviceEnable)
	return n
}

// cpuOnlyScores runs PreFilter and Score for a pod without qGPU requests,
// as kube-scheduler does (Filter is skipped), and returns the scores by node
// after NormalizeScore.
func cpuOnlyScores(t *testing.T, p *QGPU, cs fwk.CycleState, pod *v1.Pod, nodes ...*v1.Node) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSkip() {
		t.Fatalf("PreFilter = %v, want Skip (Filter leaves CPU-only pods alone)", st)
	}
	scores := make(fwk.NodeScoreList, len(nodes))
	for i, n := range nodes {
		s, st := p.Score(ctx, cs, pod, nodeInfo(n))
		if !st.IsSuccess() {
			t.Fatalf("Score(%s): %v", n.Name, st)
		}
		scores[i] = fwk.NodeScore{Name: n.Name, Score: s}
	}
	if st := p.NormalizeScore(ctx, cs, pod, scores); !st.IsSuccess() {
		t.Fatal(st)
	}
	out := map[string]int64{}
	for _, s := range scores {
		out[s.Name] = s.Score
	}
	return out
}

// Under fragfit, a pod that takes no card goes where its CPU strands no
// free card: a node without cards or with none free, not a node with free
// cards. Reserve counts its shape in the workload only on a qGPU node, and
// the pod is left to DefaultBinder. Under binpack such pods are not scored.
// (Before, the plugin scored every CPU-only pod 0 on every node.)
func TestCPUOnlyPodsKeepOffFreeCards(t *testing.T) {
	ctx := context.Background()
	free, full, plain := v100Node("free", 2, false), v100Node("full", 1, false), plainNode("plain")
	fill := builders.GPUPod("fill").General("c", 16, 100).Obj()
	pod := builders.GPUPod("cpu").CPU(2000).Obj()

	p := newPlugin(t, &args.QGPUArgs{NodePolicy: "fragfit", CardPolicy: "fragfit"})
	p.setNodes(free, full, plain)
	if node, st := schedule(t, p, fill, full); node != "full" {
		t.Fatalf("filling node full: %v", st)
	}
	learned := p.workload.Load()
	cs := framework.NewCycleState()
	scores := cpuOnlyScores(t, p, cs, pod, free, full, plain)
	if scores["free"] != 0 || scores["full"]+scores["plain"] != fwk.MaxNodeScore {
		t.Fatalf("scores %v: want the best of full and plain at %d, free at 0", scores, fwk.MaxNodeScore)
	}
	if st := p.Reserve(ctx, cs, pod, "plain"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if p.workload.Load() != learned {
		t.Fatal("a CPU-only pod on a node without cards was learned")
	}
	if st := p.Reserve(ctx, cs, pod, "full"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if w := p.workload.Load(); w == learned || w.Len() != 2 {
		t.Fatalf("workload %v after a CPU-only pod on a qGPU node, want its shape beside the card shape", w)
	}
	if _, ok := p.ledger.Holding(pod.UID); ok {
		t.Fatal("a CPU-only pod holds slices")
	}
	if st := p.Bind(ctx, cs, pod, "full"); !st.IsSkip() {
		t.Fatalf("Bind = %v, want Skip (DefaultBinder binds it)", st)
	}
	if st := p.PreBindPreFlight(ctx, cs, pod, "full"); !st.IsSkip() {
		t.Fatalf("PreBindPreFlight = %v, want Skip", st)
	}

	b := newPlugin(t, &args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack"})
	b.setNodes(free, full, plain)
	bcs := framework.NewCycleState()
	if got := cpuOnlyScores(t, b, bcs, pod, free, full, plain); got["free"] != got["plain"] || got["free"] != got["full"] {
		t.Fatalf("binpack scores %v: want CPU-only pods left to the other plugins (all equal)", got)
	}
	if _, err := readState(bcs); err == nil {
		t.Fatal("binpack wrote a cycleState for a CPU-only pod")
	}
}

// The pod informer counts the pods other schedulers bind to qGPU nodes,
// those bound before the scheduler started too (since 2026-11-27; before,
// neither "before" nor the assigned pod "ours" counted), not those on
// nodes without cards, and a pod once.
func TestWatchLearnsOtherSchedulersPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cpuPod := func(name, node string, milli int64) *v1.Pod {
		pod := builders.GPUPod(name).CPU(milli).Obj()
		pod.Spec.SchedulerName, pod.Spec.NodeName = "default-scheduler", node
		return pod
	}
	p, cs := startWatching(t, ctx, t4Node("gpu", 2, false), plainNode("plain"), cpuPod("before", "gpu", 1000))
	pods := cs.CoreV1().Pods("default")
	mustCreate := func(pod *v1.Pod) {
		t.Helper()
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(cpuPod("plain", "plain", 3000))
	mustCreate(boundPod("ours", "gpu", "uid-ours", protocol.Slice{Index: 0, UUID: "GPU-Tesla-T4-00", MemoryGiB: 4, Cores: 40}))
	other := cpuPod("other", "", 2000)
	mustCreate(other)
	other.Spec.NodeName = "gpu"
	if _, err := pods.Update(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return p.workload.Load() != nil })
	waitFor(t, func() bool { return p.workload.Load().Len() == 3 })
	want := learnedFrom(t, cpuPod("before", "gpu", 1000), boundPod("ours", "gpu", "uid-ours", protocol.Slice{MemoryGiB: 4, Cores: 40}), other)
	if !sameWorkload(p, want) {
		t.Fatalf("workload %+v, want the shapes of before, ours and other, each once: %+v", p.workload.Load(), want.Load())
	}
	if p.workload.ObservePod(other.UID, nil, 2000) {
		t.Fatal("the pod was counted again")
	}
	if err := pods.Delete(ctx, "other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return p.workload.ObservePod(other.UID, nil, 2000) })
}
