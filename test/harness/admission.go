package harness

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// WaitRequireScheduler waits (at most a minute) until the apiserver
// enforces manifests/admission/require-scheduler.yaml: the admission plugin
// loads a new policy from its informer, so a pod created right after the
// apply may still pass. The probe is a server-side dry run of a pod that
// asks for qGPU memory without a schedulerName; nothing is stored.
func WaitRequireScheduler(ctx context.Context, cs kubernetes.Interface) error {
	q := resource.MustParse("1")
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "qgpu-admission-probe", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{protocol.ResourceMemory: q, protocol.ResourceCore: resource.MustParse("10")}}}}},
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = cs.CoreV1().Pods(probe.Namespace).Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		_, refused := AdmissionRefusal(last)
		return refused, nil
	})
	if err != nil {
		return fmt.Errorf("the qgpu-require-scheduler policy is not enforced after a minute (last probe: %v): %w", last, err)
	}
	return nil
}
