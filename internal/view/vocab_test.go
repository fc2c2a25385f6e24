package view

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// A pod that asks for a percent of a card holds that percent of its node's
// card, rounded up to GiB, as the scheduler resolves it; anything else is a
// RequestMismatch.
func TestCheckRelativeRequests(t *testing.T) {
	t9k := func(name string, pct int64) *builders.PodBuilder {
		return builders.GPUPod(name).Container("c", map[string]int64{vocab.T9kGPUPercent: pct})
	}
	cases := []struct {
		name string
		pods func(t *testing.T) []v1.Pod
		want []string
	}{
		{"30% of a 16 GiB card is 5 GiB", func(t *testing.T) []v1.Pod {
			return []v1.Pod{placed(t, t9k("a", 30), one(sl(0, 5, 30)))}
		}, nil},
		{"4 GiB is less than 30%", func(t *testing.T) []v1.Pod {
			return []v1.Pod{placed(t, t9k("a", 30), one(sl(0, 4, 30)))}
		}, []string{"RequestMismatch default/a"}},
		{"node-exclusive holds both cards", func(t *testing.T) []v1.Pod {
			return []v1.Pod{placed(t, builders.GPUPod("a").Container("c", map[string]int64{vocab.T9kGPUNode: 1}),
				[]protocol.Slice{sl(0, 16, 100), sl(1, 16, 100)})}
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := kinds(Build([]v1.Node{*gpuNode(false)}, tc.pods(t), 0).Check())
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
		})
	}
}

// A pod that asks for nvidia.com/gpu alone and carries an assignment was
// placed as HAMi's (the cluster enables HAMi): its slices count on the card.
func TestCheckWholeGPUPodsCount(t *testing.T) {
	hami := func(name string) *builders.PodBuilder {
		return builders.GPUPod(name).Container("c", map[string]int64{vocab.HAMiGPU: 1})
	}
	pods := []v1.Pod{
		placed(t, hami("a"), one(sl(0, 16, 1))),
		placed(t, builders.GPUPod("b").General("c", 8, 10), one(sl(0, 8, 10))),
	}
	got := kinds(Build([]v1.Node{*gpuNode(false)}, pods, 0).Check())
	if diff := cmp.Diff([]string{"Oversubscribed n1/card0"}, got); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}
