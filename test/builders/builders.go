// Package builders makes the qGPU nodes and pods that the unit, integration
// and end-to-end tests (and the benchmarks) use, so that every test reads
// like the YAML a user writes.
package builders

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Cards returns n healthy cards of one model with indexes from 0.
func Cards(n int, model string, memoryMiB int64) []protocol.Card {
	out := make([]protocol.Card, n)
	for i := range out {
		out[i] = protocol.Card{Index: i, UUID: fmt.Sprintf("GPU-%s-%02d", model, i), Model: model, MemoryMiB: memoryMiB, Healthy: true}
	}
	return out
}

// Inventory wraps cards into the node annotation value.
func Inventory(cards []protocol.Card) string {
	inv := protocol.Inventory{Version: protocol.InventoryVersion, Cards: cards}
	s, err := inv.Encode()
	if err != nil {
		panic(err)
	}
	return s
}

// GPUNode is a qGPU node with the cards' inventory, capacity for plain pods,
// and the mixed-qgpu-enable label when mixed.
func GPUNode(name string, mixed bool, cards []protocol.Card) *v1.Node {
	labels := map[string]string{protocol.LabelDeviceEnable: protocol.LabelValueEnable, "kubernetes.io/hostname": name}
	if mixed {
		labels[protocol.LabelMixedEnable] = protocol.LabelValueEnable
	}
	capacity := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("64"),
		v1.ResourceMemory: resource.MustParse("256Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	var mem, cores int64
	for _, c := range cards {
		mem += c.MemoryGiB()
		cores += protocol.CoresPerCard
	}
	capacity[protocol.ResourceMemory] = *resource.NewQuantity(mem, resource.DecimalSI)
	capacity[protocol.ResourceCore] = *resource.NewQuantity(cores, resource.DecimalSI)
	capacity[protocol.ResourceCoreGreedy] = *resource.NewQuantity(cores, resource.DecimalSI)
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels,
			Annotations: map[string]string{protocol.AnnotationInventory: Inventory(cards)}},
		Status: v1.NodeStatus{Capacity: capacity, Allocatable: capacity,
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}},
	}
}

// PodBuilder builds a qGPU pod.
type PodBuilder struct{ pod *v1.Pod }

// GPUPod starts a pod in namespace default scheduled by qgpu-scheduler.
func GPUPod(name string) *PodBuilder {
	return &PodBuilder{pod: &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			Annotations: map[string]string{}},
		Spec: v1.PodSpec{SchedulerName: protocol.SchedulerName},
	}}
}

// Class sets the app-class annotation (online or offline).
func (b *PodBuilder) Class(c protocol.Class) *PodBuilder {
	b.pod.Annotations[protocol.AnnotationAppClass] = string(c)
	return b
}

// Annotation sets any annotation.
func (b *PodBuilder) Annotation(k, v string) *PodBuilder {
	b.pod.Annotations[k] = v
	return b
}

// Namespace sets the namespace.
func (b *PodBuilder) Namespace(ns string) *PodBuilder {
	b.pod.Namespace = ns
	return b
}

// Priority sets spec.priority.
func (b *PodBuilder) Priority(p int32) *PodBuilder {
	b.pod.Spec.Priority = &p
	return b
}

// Container adds a container asking for the given extended resources
// (requests == limits); nil or empty asks for none.
func (b *PodBuilder) Container(name string, res map[string]int64) *PodBuilder {
	list := v1.ResourceList{}
	for k, v := range res {
		list[v1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	b.pod.Spec.Containers = append(b.pod.Spec.Containers, v1.Container{
		Name: name, Image: "registry.k8s.io/pause:3.10",
		Resources: v1.ResourceRequirements{Limits: list, Requests: list.DeepCopy()},
	})
	return b
}

// CPU sets the first container's CPU request (and limit) in milli-cores,
// adding a container without qGPU resources if the pod has none: a CPU-only
// pod, as builders.GPUPod(name).CPU(1000).
func (b *PodBuilder) CPU(milli int64) *PodBuilder {
	if len(b.pod.Spec.Containers) == 0 {
		b.Container("c", nil)
	}
	r := &b.pod.Spec.Containers[0].Resources
	q := *resource.NewMilliQuantity(milli, resource.DecimalSI)
	r.Requests[v1.ResourceCPU], r.Limits[v1.ResourceCPU] = q, q
	return b
}

// General adds a general container asking for memory GiB and core percent.
func (b *PodBuilder) General(name string, memoryGiB, core int64) *PodBuilder {
	return b.Container(name, map[string]int64{protocol.ResourceMemory: memoryGiB, protocol.ResourceCore: core})
}

// Online adds a container of an online pod (memory only) and marks the pod online.
func (b *PodBuilder) Online(name string, memoryGiB int64) *PodBuilder {
	return b.Class(protocol.ClassOnline).Container(name, map[string]int64{protocol.ResourceMemory: memoryGiB})
}

// Offline adds a container of an offline pod and marks the pod offline.
func (b *PodBuilder) Offline(name string, memoryGiB, greedy int64) *PodBuilder {
	return b.Class(protocol.ClassOffline).Container(name, map[string]int64{protocol.ResourceMemory: memoryGiB, protocol.ResourceCoreGreedy: greedy})
}

// Obj returns the pod.
func (b *PodBuilder) Obj() *v1.Pod { return b.pod }
