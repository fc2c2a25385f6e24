package qgpu

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// A binding call that fails after the apiserver wrote the binding (its
// response lost) is a bind: Bind reads the pod back, so the framework does
// not Unreserve slices the pod holds. One that was not written still fails.
func TestBindSurvivesALostResponse(t *testing.T) {
	for _, persisted := range []bool{true, false} {
		t.Run(map[bool]string{true: "written, response lost", false: "not written"}[persisted], func(t *testing.T) {
			pod := builders.GPUPod("a").General("c", 4, 20).Obj()
			p := newPlugin(t, nil, pod)
			p.setNodes(t4Node("n1", 1, false))
			cs := p.handle.ClientSet().(*fake.Clientset)
			cs.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "binding" {
					return false, nil, nil
				}
				if persisted {
					b := a.(clienttesting.CreateAction).GetObject().(*v1.Binding)
					cur, err := cs.Tracker().Get(v1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
					if err != nil {
						return true, nil, err
					}
					bound := cur.(*v1.Pod).DeepCopy()
					bound.Spec.NodeName = b.Target.Name
					for k, v := range b.Annotations {
						bound.Annotations[k] = v
					}
					if err := cs.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), bound, b.Namespace); err != nil {
						return true, nil, err
					}
				}
				return true, nil, errors.New("connection reset by peer")
			})
			state := reserveOn(t, p, pod, "n1")
			st := p.Bind(context.Background(), state, pod, "n1")
			if st.IsSuccess() != persisted {
				t.Fatalf("Bind = %v, want success %v", st, persisted)
			}
			got, err := cs.CoreV1().Pods("default").Get(context.Background(), "a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if (got.Spec.NodeName == "n1") != persisted {
				t.Fatalf("pod bound to %q", got.Spec.NodeName)
			}
		})
	}
}
