package qgpu

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// realFit is kube-scheduler's NodeResourcesFit as the default profile builds it.
func realFit(t *testing.T) *noderesources.Fit {
	t.Helper()
	a := &config.NodeResourcesFitArgs{ScoringStrategy: &config.ScoringStrategy{
		Type: config.LeastAllocated, Resources: []config.ResourceSpec{{Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1}}}}
	pl, err := noderesources.NewFit(context.Background(), a, &fakeHandle{}, feature.Features{})
	if err != nil {
		t.Fatal(err)
	}
	return pl.(*noderesources.Fit)
}

// TestQGPUTakesOverFit runs the real NodeResourcesFit before QGPU, as the
// shipped profiles do: NodeResourcesFit no longer sees the qGPU resources
// (this fails if a kube-scheduler upgrade moves its state), and QGPU's Filter
// refuses what NodeResourcesFit would have, with its reason and code.
func TestQGPUTakesOverFit(t *testing.T) {
	v100 := func(name string, memGiB int64) *v1.Node {
		n := builders.GPUNode(name, true, builders.Cards(1, "Tesla-V100-SXM2-32GB", 32510))
		n.Status.Allocatable = n.Status.Allocatable.DeepCopy()
		n.Status.Allocatable[protocol.ResourceMemory] = *resource.NewQuantity(memGiB, resource.DecimalSI)
		return n
	}
	holder := builders.GPUPod("holder").General("c", 20, 30).Obj()
	tests := []struct {
		name     string
		node     *v1.Node
		held     *v1.Pod
		pod      *v1.Pod
		wantCode fwk.Code
		want     string
	}{
		{name: "fits", node: v100("n", 31), pod: builders.GPUPod("p").General("c", 8, 25).Obj()},
		{name: "device plugins gone: nothing allocatable", node: v100("n", 0), pod: builders.GPUPod("p").General("c", 8, 25).Obj(),
			wantCode: fwk.UnschedulableAndUnresolvable, want: "Insufficient " + protocol.ResourceMemory},
		{name: "allocatable less than the cards", node: v100("n", 6), pod: builders.GPUPod("p").Online("c", 8).Obj(),
			wantCode: fwk.UnschedulableAndUnresolvable, want: "Insufficient " + protocol.ResourceMemory},
		{name: "requested by a pod the ledger does not hold", node: v100("n", 31), held: holder, pod: builders.GPUPod("p").General("c", 12, 25).Obj(),
			wantCode: fwk.Unschedulable, want: "Insufficient " + protocol.ResourceMemory},
		{name: "cores requested", node: v100("n", 31), held: holder, pod: builders.GPUPod("p").General("c", 4, 80).Obj(),
			wantCode: fwk.Unschedulable, want: "Insufficient " + protocol.ResourceCore},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			fit, p := realFit(t), newPlugin(t, nil)
			p.setNodes(tt.node)
			ni := framework.NewNodeInfo()
			ni.SetNode(tt.node)
			if tt.held != nil {
				ni.AddPod(tt.held)
			}
			cs := framework.NewCycleState()
			if _, st := fit.PreFilter(ctx, cs, tt.pod, nil); !st.IsSuccess() {
				t.Fatal(st)
			}
			if _, st := p.PreFilter(ctx, cs, tt.pod, nil); !st.IsSuccess() {
				t.Fatal(st)
			}
			if st := fit.Filter(ctx, cs, tt.pod, ni); !st.IsSuccess() {
				t.Fatalf("NodeResourcesFit still checks the qGPU resources: %v", st)
			}
			st := p.Filter(ctx, cs, tt.pod, ni)
			if st.Code() != tt.wantCode || st.Message() != tt.want {
				t.Fatalf("QGPU Filter = %v %q, want %v %q", st.Code(), st.Message(), tt.wantCode, tt.want)
			}
		})
	}
}

// TestFitChecksWithoutTakeOver: when QGPU's PreFilter runs before
// NodeResourcesFit's, nothing moves and NodeResourcesFit checks as before.
func TestFitChecksWithoutTakeOver(t *testing.T) {
	ctx := context.Background()
	fit, p := realFit(t), newPlugin(t, nil)
	n := builders.GPUNode("n", false, builders.Cards(1, "Tesla-V100-SXM2-32GB", 32510))
	n.Status.Allocatable = v1.ResourceList{v1.ResourceCPU: resource.MustParse("8"), v1.ResourcePods: resource.MustParse("10")}
	p.setNodes(n)
	pod := builders.GPUPod("p").General("c", 8, 25).Obj()
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if _, st := fit.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	ni := framework.NewNodeInfo()
	ni.SetNode(n)
	if st := p.Filter(ctx, cs, pod, ni); !st.IsSuccess() {
		t.Fatalf("QGPU Filter checked what it did not take over: %v", st)
	}
	if st := fit.Filter(ctx, cs, pod, ni); st.IsSuccess() {
		t.Fatal("NodeResourcesFit passed a node with no qGPU resources allocatable")
	}
}
