package allocate

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

const testNode = "n1"

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// ctr is a container's request and its assigned slices.
type ctr struct {
	name   string
	mem    int64
	cores  int64 // qgpu-core (general) or qgpu-core-greedy (offline)
	slices []protocol.Slice
}

func slice(index int, mem, cores int64) protocol.Slice {
	return protocol.Slice{Index: index, UUID: fmt.Sprintf("GPU-%d", index), MemoryGiB: mem, Cores: cores}
}

// makePod returns a pod bound to testNode, created at t0+age seconds, with a
// valid assignment of its containers.
func makePod(name string, age int, class protocol.Class, ctrs ...ctr) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second)),
			Annotations:       map[string]string{},
		},
		Spec:   v1.PodSpec{NodeName: testNode, SchedulerName: protocol.SchedulerName},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
	if class != protocol.ClassGeneral {
		pod.Annotations[protocol.AnnotationAppClass] = string(class)
	}
	a := protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(pod.UID), Node: testNode, Class: class}
	for _, c := range ctrs {
		limits := v1.ResourceList{protocol.ResourceMemory: *resource.NewQuantity(c.mem, resource.DecimalSI)}
		switch {
		case class == protocol.ClassGeneral:
			limits[protocol.ResourceCore] = *resource.NewQuantity(c.cores, resource.DecimalSI)
		case class == protocol.ClassOffline:
			limits[protocol.ResourceCoreGreedy] = *resource.NewQuantity(c.cores, resource.DecimalSI)
		}
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: c.name, Resources: v1.ResourceRequirements{Limits: limits}})
		a.Containers = append(a.Containers, protocol.ContainerAssignment{Name: c.name, Slices: c.slices})
	}
	setAssignment(pod, &a)
	return pod
}

func setAssignment(pod *v1.Pod, a *protocol.Assignment) {
	v, err := a.Encode()
	if err != nil {
		panic(err)
	}
	pod.Annotations[protocol.AnnotationAssignment] = v
}

func general(name string, age int, mem, cores int64, card int) *v1.Pod {
	return makePod(name, age, protocol.ClassGeneral, ctr{"main", mem, cores, []protocol.Slice{slice(card, mem, cores)}})
}

// fakePods is a PodSource whose cache may lag the API server.
type fakePods struct {
	cached, fresh []*v1.Pod
	freshCalls    int
}

func (f *fakePods) Cached() ([]*v1.Pod, error) { return f.cached, nil }
func (f *fakePods) Fresh(context.Context) ([]*v1.Pod, error) {
	f.freshCalls++
	return f.fresh, nil
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}
