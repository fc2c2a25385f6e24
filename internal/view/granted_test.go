package view

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func twinNode(t *testing.T) v1.Node {
	inv := protocol.Inventory{Version: protocol.InventoryVersion, Cards: []protocol.Card{
		{Index: 0, UUID: "GPU-0", Model: "T4", MemoryMiB: 16 << 10, Healthy: true},
		{Index: 1, UUID: "GPU-1", Model: "T4", MemoryMiB: 16 << 10, Healthy: true},
	}}
	raw, err := inv.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1",
		Labels:      map[string]string{protocol.LabelDeviceEnable: protocol.LabelValueEnable},
		Annotations: map[string]string{protocol.AnnotationInventory: raw}}}
}

// twinPod asks for gib GiB and 10 cores, assigned card assigned, granted card granted.
func twinPod(t *testing.T, name string, gib int64, assigned, granted int) v1.Pod {
	enc := func(card int) string {
		a := protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: "uid-" + name, Node: "n1", Class: protocol.ClassGeneral,
			Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{{Index: card, UUID: "GPU-" + string(rune('0'+card)), MemoryGiB: gib, Cores: 10}}}}}
		s, err := a.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	lim := v1.ResourceList{protocol.ResourceMemory: *resource.NewQuantity(gib, resource.DecimalSI), protocol.ResourceCore: resource.MustParse("10")}
	return v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			Annotations: map[string]string{protocol.AnnotationAssignment: enc(assigned), protocol.AnnotationGrant: enc(granted)}},
		Spec:   v1.PodSpec{NodeName: "n1", Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Limits: lim, Requests: lim}}}},
		Status: v1.PodStatus{Phase: v1.PodRunning},
	}
}

func TestCheckGrants(t *testing.T) {
	cases := []struct {
		name        string
		pods        func(t *testing.T) []v1.Pod
		wantKinds   []string
		wantSwapped []string
	}{
		{"twins swapped: card totals right", func(t *testing.T) []v1.Pod {
			return []v1.Pod{twinPod(t, "a", 4, 0, 1), twinPod(t, "b", 4, 1, 0)}
		}, nil, []string{"default/a", "default/b"}},
		{"one grant elsewhere: the ledger is wrong", func(t *testing.T) []v1.Pod {
			return []v1.Pod{twinPod(t, "a", 4, 0, 1), twinPod(t, "b", 4, 1, 1)}
		}, []string{"GrantMismatch default/a"}, nil},
		{"grants oversubscribe a card", func(t *testing.T) []v1.Pod {
			return []v1.Pod{twinPod(t, "a", 12, 0, 0), twinPod(t, "b", 12, 1, 0)}
		}, []string{"GrantMismatch default/b", "OversubscribedGranted n1/card0"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Build([]v1.Node{twinNode(t)}, tc.pods(t), 0)
			var kinds []string
			for _, v := range c.Check() {
				kinds = append(kinds, v.Kind+" "+v.Object)
			}
			slices.Sort(kinds)
			if diff := cmp.Diff(tc.wantKinds, kinds); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
			got := c.Swapped()
			slices.Sort(got)
			if diff := cmp.Diff(tc.wantSwapped, got); diff != "" {
				t.Errorf("swapped (-want +got):\n%s", diff)
			}
		})
	}
}
