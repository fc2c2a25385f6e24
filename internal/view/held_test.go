package view

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func heldPod(name, node string, phase v1.PodPhase) v1.Pod {
	q := resource.MustParse("1")
	return v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Limits: v1.ResourceList{protocol.ResourceMemory: q, protocol.ResourceCore: resource.MustParse("10")},
		}}}},
		Status: v1.PodStatus{Phase: phase},
	}
}

func TestCheckHeld(t *testing.T) {
	c := Build(nil, []v1.Pod{
		heldPod("running", "n1", v1.PodRunning),
		heldPod("done", "n1", v1.PodSucceeded),
		heldPod("moved", "n2", v1.PodRunning),
	}, 0)
	held := func(name string) Held {
		return Held{Node: "n1", PodUID: types.UID("uid-" + name), Namespace: "default", Name: name, Container: "c", Resource: protocol.ResourceMemory}
	}
	var kinds []string
	for _, v := range c.CheckHeld([]Held{held("running"), held("done"), held("moved"), held("gone")}) {
		kinds = append(kinds, v.String())
	}
	want := []string{
		"StaleGrant default/done container c on n1: the agent holds tke.cloud.tencent.com/qgpu-memory for a pod in phase Succeeded",
		`StaleGrant default/moved container c on n1: the agent holds tke.cloud.tencent.com/qgpu-memory for a pod bound to "n2"`,
		"StaleGrant default/gone container c on n1: the agent holds tke.cloud.tencent.com/qgpu-memory for pod UID uid-gone, which no longer exists",
	}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Fatalf("violations (-want +got):\n%s", diff)
	}
}
