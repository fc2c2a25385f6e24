package app

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/internal/view"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// bound places a pod on n1 with one slice of card 0 of builders.Cards.
func bound(t *testing.T, b *builders.PodBuilder, gib, cores int64) v1.Pod {
	t.Helper()
	pod := b.Obj()
	class, err := protocol.ParseClass(pod.Annotations[protocol.AnnotationAppClass], pod.Annotations[protocol.AnnotationAppClass] != "")
	if err != nil {
		t.Fatal(err)
	}
	a := protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(pod.UID), Node: "n1", Class: class,
		Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{{Index: 0, UUID: "GPU-T4-00", MemoryGiB: gib, Cores: cores}}}}}
	raw, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations[protocol.AnnotationAssignment] = raw
	pod.Spec.NodeName, pod.Status.Phase = "n1", v1.PodRunning
	return *pod
}

func TestPrintCheck(t *testing.T) {
	node := builders.GPUNode("n1", false, builders.Cards(1, "T4", 16<<10))
	cases := []struct {
		name  string
		nodes []v1.Node
		pods  func(t *testing.T) []v1.Pod
		want  string
		count int
	}{
		{"clean", []v1.Node{*node}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{bound(t, builders.GPUPod("a").General("c", 4, 10), 4, 10)}
		}, "violations 0\n", 0},
		{"a warning is not counted", []v1.Node{*node}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{bound(t, builders.GPUPod("a").Online("c", 4), 4, 0)}
		}, "warning: NotMixedNode default/a: an online pod on n1, which is not labelled mixed-qgpu-enable=enable (not counted: it may have changed after the pod was placed)\nviolations 0\n", 0},
		{"Node object gone under three 10 GiB pods", nil, func(t *testing.T) []v1.Pod {
			return []v1.Pod{
				bound(t, builders.GPUPod("a").General("c", 10, 10), 10, 10),
				bound(t, builders.GPUPod("b").General("c", 10, 10), 10, 10),
				bound(t, builders.GPUPod("c").General("c", 10, 10), 10, 10),
			}
		}, "NodeUnknown n1: 3 qGPU pods hold slices on a node whose capacity is unknown (no Node object): default/a, default/b, default/c\nviolations 1\n", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			n := printCheck(&out, view.Build(tc.nodes, tc.pods(t), 0))
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if n != tc.count {
				t.Errorf("count %d, want %d", n, tc.count)
			}
		})
	}
}
