package app

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeepCopyObject copies every slice: changing the copy leaves the original.
func TestDeepCopy(t *testing.T) {
	nodes := &NodeCardsList{TypeMeta: typeMeta("NodeCardsList"), Items: []NodeCards{{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Cards: []Card{{Index: 0, Holders: []string{"a/b"}}}}}}
	nc := nodes.DeepCopyObject().(*NodeCardsList)
	if diff := cmp.Diff(nodes, nc); diff != "" {
		t.Errorf("copy differs (-orig +copy):\n%s", diff)
	}
	nc.Items[0].Cards[0].Holders[0], nc.Items[0].Cards[0].UsedCores = "x/y", 5
	if nodes.Items[0].Cards[0].Holders[0] != "a/b" || nodes.Items[0].Cards[0].UsedCores != 0 {
		t.Error("changing the copy changed the original's cards")
	}

	since := metav1.Now()
	pods := &PodSlicesList{TypeMeta: typeMeta("PodSlicesList"), Items: []PodSlices{{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Assigned: []ContainerSlices{{Name: "c", Slices: []Slice{{Card: 1, MemoryGiB: 2}}}}, SuspendedSince: &since}}}
	pc := pods.DeepCopyObject().(*PodSlicesList)
	if diff := cmp.Diff(pods, pc); diff != "" {
		t.Errorf("copy differs (-orig +copy):\n%s", diff)
	}
	pc.Items[0].Assigned[0].Slices[0].MemoryGiB = 9
	pc.Items[0].SuspendedSince.Time = since.Add(1)
	if pods.Items[0].Assigned[0].Slices[0].MemoryGiB != 2 || !pods.Items[0].SuspendedSince.Equal(&since) {
		t.Error("changing the copy changed the original's pod")
	}
}
