package qgpu

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/args"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

func labelled(n *v1.Node, v vocab.Vocabulary) *v1.Node {
	n.Labels[vocab.Label(v)] = protocol.LabelValueEnable
	return n
}

// slicesOf reads the assignment PreBind wrote: per container, card index → (GiB, cores).
func slicesOf(t *testing.T, p *QGPU, pod *v1.Pod) map[string][][3]int64 {
	t.Helper()
	got, err := p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := protocol.DecodeAssignment([]byte(got.Annotations[protocol.AnnotationAssignment]))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][][3]int64{}
	for _, c := range a.Containers {
		for _, s := range c.Slices {
			out[c.Name] = append(out[c.Name], [3]int64{int64(s.Index), s.MemoryGiB, s.Cores})
		}
	}
	return out
}

// Each vocabulary's pod is placed with the native accounting, relative
// memory resolved against the node's cards (a T4 of 15109 MiB is 14 GiB).
func TestVocabularyPodsArePlaced(t *testing.T) {
	tests := []struct {
		name string
		voc  vocab.Vocabulary
		pod  *v1.Pod
		want map[string][][3]int64
	}{{
		name: "vcuda README: two containers, 20 cores each, 1000 and 2000 MiB",
		voc:  vocab.VCUDA,
		pod: builders.GPUPod("vcuda").Container("c1", map[string]int64{vocab.VCUDACore: 20, vocab.VCUDAMemory: 1000}).
			Container("c2", map[string]int64{vocab.VCUDACore: 20, vocab.VCUDAMemory: 2000}).Obj(),
		want: map[string][][3]int64{"c1": {{0, 1, 20}}, "c2": {{0, 2, 20}}},
	}, {
		name: "t9k percent 30: ceil(30% of 14 GiB) = 5 GiB",
		voc:  vocab.T9k,
		pod:  builders.GPUPod("t9k").Container("c", map[string]int64{vocab.T9kGPUPercent: 30}).Obj(),
		want: map[string][][3]int64{"c": {{0, 5, 30}}},
	}, {
		name: "t9k node-exclusive takes every card",
		voc:  vocab.T9k,
		pod:  builders.GPUPod("t9k").Container("c", map[string]int64{vocab.T9kGPUNode: 1}).Obj(),
		want: map[string][][3]int64{"c": {{0, 14, 100}, {1, 14, 100}}},
	}, {
		name: "hami gpumem-percentage 50, gpucores 40",
		voc:  vocab.HAMi,
		pod:  builders.GPUPod("hami").Container("c", map[string]int64{vocab.HAMiGPU: 1, vocab.HAMiMemoryPercent: 50, vocab.HAMiCores: 40}).Obj(),
		want: map[string][][3]int64{"c": {{0, 7, 40}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlugin(t, nil)
			node := labelled(t4Node("n", 2, false), tt.voc)
			p.setNodes(node)
			if got, st := schedule(t, p, tt.pod, node); got != "n" {
				t.Fatalf("schedule = %q, %v", got, st)
			}
			if diff := cmp.Diff(tt.want, slicesOf(t, p, tt.pod)); diff != "" {
				t.Errorf("assignment (-want +got):\n%s", diff)
			}
		})
	}
}

// A node takes a vocabulary when its label or the profile's args enable it;
// otherwise Filter names the label.
func TestVocabularyEnabling(t *testing.T) {
	pod := func() *v1.Pod {
		return builders.GPUPod("t9k").Container("c", map[string]int64{vocab.T9kGPU: 1}).Obj()
	}
	tests := []struct {
		name     string
		args     *args.QGPUArgs
		node     *v1.Node
		wantCode fwk.Code
		want     string
	}{
		{"neither label nor args", nil, t4Node("n", 1, false), fwk.UnschedulableAndUnresolvable,
			"node does not take t9k pods (label vocabulary.qgpu.io/t9k=enable)"},
		{"another vocabulary's label", nil, labelled(t4Node("n", 1, false), vocab.HAMi), fwk.UnschedulableAndUnresolvable,
			"node does not take t9k pods (label vocabulary.qgpu.io/t9k=enable)"},
		{"label", nil, labelled(t4Node("n", 1, false), vocab.T9k), fwk.Success, ""},
		{"cluster-wide args", &args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack", Vocabularies: []string{"t9k"}},
			t4Node("n", 1, false), fwk.Success, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlugin(t, tt.args)
			p.setNodes(tt.node)
			cs := framework.NewCycleState()
			if _, st := p.PreFilter(context.Background(), cs, pod(), nil); !st.IsSuccess() {
				t.Fatal(st)
			}
			st := p.Filter(context.Background(), cs, pod(), nodeInfo(tt.node))
			if st.Code() != tt.wantCode || st.Message() != tt.want {
				t.Fatalf("Filter = %v %q, want %v %q", st.Code(), st.Message(), tt.wantCode, tt.want)
			}
		})
	}
}

// nvidia.com/gpu alone is HAMi's only where the profile enables HAMi for
// the whole cluster; elsewhere the pod is not QGPU's (PreFilter skips it).
func TestWholeGPUIsHAMiOnlyClusterWide(t *testing.T) {
	pod := builders.GPUPod("gpu").Container("c", map[string]int64{vocab.HAMiGPU: 1}).Obj()
	if _, st := newPlugin(t, nil).PreFilter(context.Background(), framework.NewCycleState(), pod, nil); st.Code() != fwk.Skip {
		t.Fatalf("PreFilter without HAMi = %v, want Skip", st)
	}
	p := newPlugin(t, &args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack", Vocabularies: []string{"hami"}})
	node := t4Node("n", 1, false)
	p.setNodes(node)
	if got, st := schedule(t, p, pod, node); got != "n" {
		t.Fatalf("schedule = %q, %v", got, st)
	}
	if diff := cmp.Diff(map[string][][3]int64{"c": {{0, 14, 1}}}, slicesOf(t, p, pod)); diff != "" {
		t.Errorf("assignment (-want +got):\n%s", diff)
	}
}

// NodeResourcesFit no longer checks the resources no device plugin serves
// (vcuda-memory here), which no node lists; it still checks vcuda-core.
func TestFitLeavesUnadvertisedToTheLedger(t *testing.T) {
	ctx := context.Background()
	node := labelled(t4Node("n", 1, false), vocab.VCUDA)
	node.Status.Allocatable[vocab.VCUDACore] = node.Status.Allocatable[protocol.ResourceCore]
	pod := builders.GPUPod("vcuda").Container("c", map[string]int64{vocab.VCUDACore: 20, vocab.VCUDAMemory: 1000}).Obj()
	fit, p := realFit(t), newPlugin(t, nil)
	p.setNodes(node)
	ni := nodeInfo(node)
	cs := framework.NewCycleState()
	if _, st := fit.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := fit.Filter(ctx, cs, pod, ni); !st.IsSuccess() {
		t.Fatalf("NodeResourcesFit checks vcuda-memory: %v", st)
	}
	delete(node.Status.Allocatable, vocab.VCUDACore)
	if st := fit.Filter(ctx, cs, pod, nodeInfo(node)); st.IsSuccess() {
		t.Fatal("NodeResourcesFit no longer checks vcuda-core, which the agent serves")
	}
}

// A relative request is resolved once per shape of node in a cycle: Filter
// on the next node of the same shape allocates nothing.
func TestFilterResolvesOncePerNodeShape(t *testing.T) {
	p := newPlugin(t, nil)
	n := labelled(t4Node("n1", 2, false), vocab.T9k)
	p.setNodes(n)
	pod := builders.GPUPod("t9k").Container("c", map[string]int64{vocab.T9kGPUPercent: 30}).Obj()
	ni := nodeInfo(n)
	ctx := context.Background()
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, cs, pod, ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if allocs := testing.AllocsPerRun(100, func() { p.Filter(ctx, cs, pod, ni) }); allocs != 0 {
		t.Fatalf("Filter allocates %v times per call once resolved", allocs)
	}
}
