package view

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// TestWarnings: what can change under a running pod is a warning, never a
// violation.
func TestWarnings(t *testing.T) {
	sick := builders.GPUNode("n1", false, builders.Cards(2, "Tesla-T4", 16<<10))
	cards := builders.Cards(2, "Tesla-T4", 16<<10)
	cards[1].Healthy = false
	sick.Annotations[protocol.AnnotationInventory] = builders.Inventory(cards)
	cases := []struct {
		name string
		node *v1.Node
		pods func(t *testing.T) []v1.Pod
		want []string
	}{
		{"online and offline on a mixed node", gpuNode(true), func(t *testing.T) []v1.Pod {
			return []v1.Pod{
				placed(t, builders.GPUPod("a").Online("c", 2), one(sl(0, 2, 0))),
				placed(t, builders.GPUPod("b").Offline("c", 2, 50), one(sl(0, 2, 50))),
			}
		}, nil},
		{"mixed label removed", gpuNode(false), func(t *testing.T) []v1.Pod {
			return []v1.Pod{
				placed(t, builders.GPUPod("a").Online("c", 2), one(sl(0, 2, 0))),
				placed(t, builders.GPUPod("b").Offline("c", 2, 50), one(sl(0, 2, 50))),
				placed(t, builders.GPUPod("g").General("c", 2, 50), one(sl(1, 2, 50))),
			}
		}, []string{"NotMixedNode default/a", "NotMixedNode default/b"}},
		{"card turned unhealthy", sick, func(t *testing.T) []v1.Pod {
			return []v1.Pod{
				placed(t, builders.GPUPod("a").General("c", 2, 10), one(sl(0, 2, 10))),
				placed(t, builders.GPUPod("b").General("c", 2, 10), one(sl(1, 2, 10))),
			}
		}, []string{"UnhealthyCard default/b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Build([]v1.Node{*tc.node.DeepCopy()}, tc.pods(t), 0)
			if diff := cmp.Diff(tc.want, kinds(c.Warnings())); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if v := c.Check(); len(v) > 0 {
				t.Errorf("violations %v, want none: a warning is not counted", v)
			}
		})
	}
}
