package qgpu

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// exclusiveCycle runs PreFilter for pod as a node-exclusive pod. The
// request parser sets NodeExclusive from tensorstack.dev/nvidia-gpu-node
// (docs/node-exclusive.md); these tests set it on the parsed request so
// that they test the placement alone.
func exclusiveCycle(t *testing.T, p *QGPU, pod *v1.Pod) fwk.CycleState {
	t.Helper()
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(context.Background(), cs, pod, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	s, err := readState(cs)
	if err != nil {
		t.Fatal(err)
	}
	s.req.NodeExclusive = true
	return cs
}

// nodeInfoWith is a NodeInfo with pods on it (bound or assumed).
func nodeInfoWith(n *v1.Node, pods ...*v1.Pod) fwk.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(n)
	for _, p := range pods {
		p = p.DeepCopy()
		p.Spec.NodeName = n.Name
		ni.AddPod(p)
	}
	return ni
}

// A node-exclusive pod and a GPU pod never share a node, in either order
// of arrival; pods without GPU do not count.
func TestNodeExclusive(t *testing.T) {
	plain := &v1.Pod{}
	plain.Name, plain.Namespace = "plain", "default"
	plain.Spec.Containers = []v1.Container{{Name: "c"}}
	cases := []struct {
		name string
		// first is placed on n1 before the exclusive pod (nil: nothing).
		first   *v1.Pod
		onNode  []*v1.Pod
		want    fwk.Code
		message string
	}{
		{name: "empty node", want: fwk.Success},
		{name: "a pod without GPU does not count", onNode: []*v1.Pod{plain}, want: fwk.Success},
		{name: "a general pod came first", first: builders.GPUPod("g").General("c", 2, 10).Obj(),
			want: fwk.Unschedulable, message: ReasonNodeNotEmpty},
		{name: "a GPU pod bound without assignment yet", onNode: []*v1.Pod{builders.GPUPod("g").General("c", 2, 10).Obj()},
			want: fwk.Unschedulable, message: ReasonNodeNotEmpty},
		{name: "a whole-card pod of NVIDIA's device plugin", onNode: []*v1.Pod{builders.GPUPod("w").Container("c", map[string]int64{"nvidia.com/gpu": 1}).Obj()},
			want: fwk.Unschedulable, message: ReasonNodeNotEmpty},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPlugin(t, nil)
			n1 := t4Node("n1", 2, false)
			p.setNodes(n1)
			var onNode []*v1.Pod
			if c.first != nil {
				if node, st := schedule(t, p, c.first, n1); !st.IsSuccess() || node != "n1" {
					t.Fatalf("first pod: %q %v", node, st)
				}
				onNode = append(onNode, c.first)
			}
			onNode = append(onNode, c.onNode...)
			pod := builders.GPUPod("x").General("c", 1, 1).Obj()
			cs := exclusiveCycle(t, p, pod)
			st := p.Filter(context.Background(), cs, pod, nodeInfoWith(n1, onNode...))
			if st.Code() != c.want || (c.message != "" && st.Message() != c.message) {
				t.Fatalf("Filter: %v %q, want %v %q", st.Code(), st.Message(), c.want, c.message)
			}
		})
	}
}

// Once a node-exclusive pod holds a node, every card is full: a later GPU
// pod goes to another node, or nowhere.
func TestNodeExclusiveHoldsEveryCard(t *testing.T) {
	p := newPlugin(t, nil)
	n1, n2 := t4Node("n1", 2, false), t4Node("n2", 1, false)
	p.setNodes(n1, n2)
	pod := builders.GPUPod("x").General("c", 1, 1).Obj()
	cs := exclusiveCycle(t, p, pod)
	if st := p.Filter(context.Background(), cs, pod, nodeInfo(n1)); !st.IsSuccess() {
		t.Fatalf("Filter: %v", st)
	}
	if st := p.Reserve(context.Background(), cs, pod, "n1"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	h, ok := p.ledger.Holding(pod.UID)
	if !ok || len(h.Slices) != 2 {
		t.Fatalf("holding %+v, want both cards", h)
	}
	for _, s := range h.Slices {
		if s.Cores != 100 || s.MemoryGiB != 14 {
			t.Fatalf("slice %+v, want the whole card (14 GiB, 100 cores)", s)
		}
	}
	small := builders.GPUPod("small").General("c", 1, 1).Obj()
	if node, st := schedule(t, p, small, n1, n2); !st.IsSuccess() || node != "n2" {
		t.Fatalf("a later pod: %q %v, want n2", node, st)
	}
	if _, st := schedule(t, p, builders.GPUPod("more").General("c", 1, 1).Obj(), n1); st.Code() != fwk.Unschedulable || st.Message() != placement.ReasonCardsFull {
		t.Fatalf("a GPU pod on the node of a node-exclusive pod: %v %q, want %q", st.Code(), st.Message(), placement.ReasonCardsFull)
	}
	// A second node-exclusive pod finds n1 held.
	other := builders.GPUPod("y").General("c", 1, 1).Obj()
	cs = exclusiveCycle(t, p, other)
	if st := p.Filter(context.Background(), cs, other, nodeInfo(n1)); st.Code() != fwk.Unschedulable || st.Message() != ReasonNodeNotEmpty {
		t.Fatalf("second node-exclusive pod on n1: %v %q", st.Code(), st.Message())
	}
}

// A pod without qGPU requests scheduled by qgpu-scheduler: PreFilter skips
// it, which skips Filter but not Score or Reserve, and those must let it
// through (they once failed it with "reading QGPU from cycleState: not
// found", so such a pod never scheduled on two feasible nodes or on one).
func TestPodWithoutGPUPassesEveryPoint(t *testing.T) {
	p := newPlugin(t, nil)
	n1 := t4Node("n1", 1, false)
	p.setNodes(n1)
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = "cpu", "default", "uid-cpu"
	pod.Spec.Containers = []v1.Container{{Name: "c"}}
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(context.Background(), cs, pod, nil); st.Code() != fwk.Skip {
		t.Fatalf("PreFilter: %v, want Skip", st)
	}
	if _, st := p.Score(context.Background(), cs, pod, nodeInfo(n1)); !st.IsSuccess() {
		t.Fatalf("Score: %v", st)
	}
	if st := p.Reserve(context.Background(), cs, pod, "n1"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	if st := p.Bind(context.Background(), cs, pod, "n1"); st.Code() != fwk.Skip {
		t.Fatalf("Bind: %v, want Skip (DefaultBinder binds it)", st)
	}
}
