package view

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// gpuNode is node n1 with two 16 GiB cards (4 pods each by default).
func gpuNode(mixed bool) *v1.Node {
	return builders.GPUNode("n1", mixed, builders.Cards(2, "Tesla-T4", 16<<10))
}

// sl is a slice of card i of gpuNode.
func sl(i int, gib, cores int64) protocol.Slice {
	return protocol.Slice{Index: i, UUID: fmt.Sprintf("GPU-Tesla-T4-%02d", i), MemoryGiB: gib, Cores: cores}
}

// record encodes an assignment for pod on node giving its i-th container cs[i].
func record(t *testing.T, pod *v1.Pod, node string, cs [][]protocol.Slice) string {
	t.Helper()
	class, err := protocol.ParseClass(pod.Annotations[protocol.AnnotationAppClass], pod.Annotations[protocol.AnnotationAppClass] != "")
	if err != nil {
		t.Fatal(err)
	}
	a := protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(pod.UID), Node: node, Class: class}
	for i, s := range cs {
		a.Containers = append(a.Containers, protocol.ContainerAssignment{Name: pod.Spec.Containers[i].Name, Slices: s})
	}
	raw, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// placed binds the pod to n1, running, with the assignment cs.
func placed(t *testing.T, b *builders.PodBuilder, cs ...[]protocol.Slice) v1.Pod {
	t.Helper()
	pod := b.Obj()
	pod.Spec.NodeName, pod.Status.Phase = "n1", v1.PodRunning
	pod.Annotations[protocol.AnnotationAssignment] = record(t, pod, "n1", cs)
	return *pod
}

// granted adds the agent's grant cs to a placed pod.
func granted(t *testing.T, pod v1.Pod, cs ...[]protocol.Slice) v1.Pod {
	t.Helper()
	pod.Annotations[protocol.AnnotationGrant] = record(t, &pod, "n1", cs)
	return pod
}

func one(s protocol.Slice) []protocol.Slice { return []protocol.Slice{s} }

// tenOnCard0 is three pods of 10 GiB on card 0 of n1 (16 GiB): 30 GiB held.
func tenOnCard0(t *testing.T) []v1.Pod {
	var out []v1.Pod
	for _, name := range []string{"a", "b", "c"} {
		out = append(out, placed(t, builders.GPUPod(name).General("c", 10, 10), one(sl(0, 10, 10))))
	}
	return out
}

func kinds(v []Violation) []string {
	var out []string
	for _, x := range v {
		out = append(out, x.Kind+" "+x.Object)
	}
	slices.Sort(out)
	return out
}

func TestCheck(t *testing.T) {
	unlabelled := gpuNode(false)
	delete(unlabelled.Labels, protocol.LabelDeviceEnable)
	broken := gpuNode(false)
	broken.Annotations[protocol.AnnotationInventory] = "{not json"
	noInventory := gpuNode(false)
	delete(noInventory.Annotations, protocol.AnnotationInventory)
	cases := []struct {
		name  string
		nodes []*v1.Node
		pods  func(t *testing.T) []v1.Pod
		want  []string
	}{
		{"within capacity", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{
				placed(t, builders.GPUPod("a").General("c", 8, 50), one(sl(0, 8, 50))),
				placed(t, builders.GPUPod("b").General("c", 8, 50), one(sl(0, 8, 50))),
				placed(t, builders.GPUPod("w").General("c", 16, 100), one(sl(1, 16, 100))),
			}
		}, nil},
		{"memory by assignments", []*v1.Node{gpuNode(false)}, tenOnCard0, []string{"Oversubscribed n1/card0"}},
		{"general cores by assignments", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{
				placed(t, builders.GPUPod("a").General("c", 2, 60), one(sl(0, 2, 60))),
				placed(t, builders.GPUPod("b").General("c", 2, 60), one(sl(0, 2, 60))),
			}
		}, []string{"Oversubscribed n1/card0"}},
		{"offline core-greedy by assignments", []*v1.Node{gpuNode(true)}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{
				placed(t, builders.GPUPod("a").Offline("c", 2, 60), one(sl(0, 2, 60))),
				placed(t, builders.GPUPod("b").Offline("c", 2, 60), one(sl(0, 2, 60))),
			}
		}, []string{"Oversubscribed n1/card0"}},
		{"pods per card by assignments", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			var out []v1.Pod
			for i := range 5 {
				out = append(out, placed(t, builders.GPUPod(fmt.Sprintf("p%d", i)).General("c", 1, 10), one(sl(0, 1, 10))))
			}
			return out
		}, []string{"Oversubscribed n1/card0"}},
		{"classes mixed on a card", []*v1.Node{gpuNode(true)}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{
				placed(t, builders.GPUPod("a").General("c", 2, 10), one(sl(0, 2, 10))),
				placed(t, builders.GPUPod("b").Online("c", 2), one(sl(0, 2, 0))),
			}
		}, []string{"Oversubscribed n1/card0"}},
		{"terminal pods hold nothing", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			pods := tenOnCard0(t)
			pods[0].Status.Phase, pods[1].Status.Phase = v1.PodSucceeded, v1.PodFailed
			return pods
		}, nil},
		{"memory by grants", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{
				granted(t, placed(t, builders.GPUPod("a").General("c", 10, 10), one(sl(0, 10, 10))), one(sl(0, 10, 10))),
				granted(t, placed(t, builders.GPUPod("b").General("c", 10, 10), one(sl(1, 10, 10))), one(sl(0, 10, 10))),
			}
		}, []string{"GrantMismatch default/b", "OversubscribedGranted n1/card0"}},
		{"a swap between unequal pods", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{
				granted(t, placed(t, builders.GPUPod("a").General("c", 4, 10), one(sl(0, 4, 10))), one(sl(1, 4, 10))),
				granted(t, placed(t, builders.GPUPod("b").General("c", 8, 10), one(sl(1, 8, 10))), one(sl(0, 8, 10))),
			}
		}, []string{"GrantMismatch default/a", "GrantMismatch default/b"}},
		{"bound without assignment", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			p := builders.GPUPod("a").General("c", 2, 10).Obj()
			p.Spec.NodeName, p.Status.Phase = "n1", v1.PodRunning
			return []v1.Pod{*p}
		}, []string{"Unassigned default/a"}},
		{"assignment made for another pod", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			p := placed(t, builders.GPUPod("a").General("c", 2, 10), one(sl(0, 2, 10)))
			p.UID = "other"
			return []v1.Pod{p}
		}, []string{"Unassigned default/a"}},
		{"qgpu-device-enable label removed", []*v1.Node{unlabelled}, tenOnCard0, []string{"Oversubscribed n1/card0"}},
		{"inventory malformed", []*v1.Node{broken}, tenOnCard0, []string{"NodeUnknown n1"}},
		{"inventory missing", []*v1.Node{noInventory}, tenOnCard0, []string{"NodeUnknown n1"}},
		{"Node object gone", nil, tenOnCard0, []string{"NodeUnknown n1"}},
		{"Node object gone under terminal pods", nil, func(t *testing.T) []v1.Pod {
			pods := tenOnCard0(t)
			for i := range pods {
				pods[i].Status.Phase = v1.PodSucceeded
			}
			return pods
		}, nil},
		{"Node object gone, cores still judged", nil, func(t *testing.T) []v1.Pod {
			return []v1.Pod{
				placed(t, builders.GPUPod("a").General("c", 2, 60), one(sl(0, 2, 60))),
				placed(t, builders.GPUPod("b").General("c", 2, 60), one(sl(0, 2, 60))),
			}
		}, []string{"NodeUnknown n1", "Oversubscribed n1/card0"}},
		{"slice on a card not in the inventory", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			s := sl(0, 10, 10)
			s.UUID = "GPU-elsewhere"
			return []v1.Pod{placed(t, builders.GPUPod("a").General("c", 10, 10), one(s))}
		}, []string{"UnknownCard default/a"}},
		{"grant on a card not in the inventory", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			s := sl(2, 10, 10)
			return []v1.Pod{granted(t, placed(t, builders.GPUPod("a").General("c", 10, 10), one(sl(0, 10, 10))), one(s))}
		}, []string{"GrantMismatch default/a", "UnknownCard default/a"}},
		{"given more than the request", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{placed(t, builders.GPUPod("a").General("c", 2, 10), one(sl(0, 12, 90)))}
		}, []string{"RequestMismatch default/a"}},
		{"granted more than the request", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{granted(t, placed(t, builders.GPUPod("a").General("c", 2, 10), one(sl(0, 2, 10))), one(sl(0, 12, 90)))}
		}, []string{"GrantMismatch default/a", "RequestMismatch default/a"}},
		{"whole cards split over k cards", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{placed(t, builders.GPUPod("a").General("c", 32, 200), []protocol.Slice{sl(0, 16, 100), sl(1, 16, 100)})}
		}, nil},
		{"whole cards on fewer cards than asked", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{placed(t, builders.GPUPod("a").General("c", 32, 200), one(sl(0, 16, 100)))}
		}, []string{"RequestMismatch default/a"}},
		{"a container without its slice", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{placed(t, builders.GPUPod("a").General("c", 2, 10).General("d", 2, 10), one(sl(0, 2, 10)))}
		}, []string{"RequestMismatch default/a"}},
		{"a slice for a container that asks for none", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{placed(t, builders.GPUPod("a").General("c", 2, 10).Container("sidecar", nil), one(sl(0, 2, 10)), one(sl(1, 2, 10)))}
		}, []string{"RequestMismatch default/a"}},
		{"assigned another class than the pod's", []*v1.Node{gpuNode(true)}, func(t *testing.T) []v1.Pod {
			p := placed(t, builders.GPUPod("a").General("c", 2, 10), one(sl(0, 2, 10)))
			p.Annotations[protocol.AnnotationAppClass] = string(protocol.ClassOffline)
			p.Spec.Containers[0] = builders.GPUPod("x").Offline("c", 2, 10).Obj().Spec.Containers[0]
			return []v1.Pod{p}
		}, []string{"RequestMismatch default/a"}},
		{"slices held on an invalid request", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			p := placed(t, builders.GPUPod("a").General("c", 2, 10), one(sl(0, 2, 10)))
			p.Annotations[protocol.AnnotationAppClass] = "batch"
			return []v1.Pod{p}
		}, []string{"RequestMismatch default/a"}},
		{"model filter", []*v1.Node{gpuNode(false)}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{
				placed(t, builders.GPUPod("a").Annotation(protocol.AnnotationUseGPUType, "V100").General("c", 2, 10), one(sl(0, 2, 10))),
				placed(t, builders.GPUPod("b").Annotation(protocol.AnnotationNoUseGPUType, "t4").General("c", 2, 10), one(sl(0, 2, 10))),
				placed(t, builders.GPUPod("ok").Annotation(protocol.AnnotationUseGPUType, "T4").General("c", 2, 10), one(sl(1, 2, 10))),
			}
		}, []string{"ModelFilter default/a", "ModelFilter default/b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []v1.Node
			for _, n := range tc.nodes {
				nodes = append(nodes, *n.DeepCopy())
			}
			got := kinds(Build(nodes, tc.pods(t), 0).Check())
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
		})
	}
}
