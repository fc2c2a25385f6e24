package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/agent/xgn"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestXGNNodeTakesNoPodWithoutGPU labels a qGPU node xgn, lets the agent's
// taint keeper (agent/xgn, run here in the test process against the real
// apiserver) taint it, and runs the real scheduler: a pod without GPU goes
// to the node without the label, or nowhere; a GPU pod with the toleration
// the admission policy adds goes to the xgn node.
func TestXGNNodeTakesNoPodWithoutGPU(t *testing.T) {
	cp := harness.Start(t)
	cs := cp.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x := builders.GPUNode("xgn", false, builders.Cards(1, "Tesla-T4", t4MiB))
	x.Labels[xgn.LabelAllocMode] = xgn.ModeXGN
	createNodes(t, cs, x)
	if err := xgn.Keep(ctx, cs, "xgn"); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "xgn", metav1.GetOptions{})
		return err == nil && len(n.Spec.Taints) == 1 && n.Spec.Taints[0] == xgn.Taint, nil
	})
	if err != nil {
		t.Fatalf("the xgn node was not tainted: %v", err)
	}
	harness.StartQGPUScheduler(t, cp, "config/qgpu-scheduler.yaml")

	cpuPod := func(name string) *corev1.Pod {
		p := builders.GPUPod(name).Container("c", nil).Obj()
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
		return p
	}
	createPods(t, cs, cpuPod("cpu-alone"))
	if msg := waitFailedScheduling(t, cs, "default", "cpu-alone"); !strings.Contains(msg, "1 node(s) had untolerated taint") {
		t.Errorf("cpu-alone: FailedScheduling %q does not name the xgn taint", msg)
	}
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}, Status: corev1.NodeStatus{
		Allocatable: corev1.ResourceList{corev1.ResourcePods: x.Status.Allocatable[corev1.ResourcePods], corev1.ResourceCPU: x.Status.Allocatable[corev1.ResourceCPU]},
		Capacity:    corev1.ResourceList{corev1.ResourcePods: x.Status.Allocatable[corev1.ResourcePods], corev1.ResourceCPU: x.Status.Allocatable[corev1.ResourceCPU]},
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	createNodes(t, cs, plain)
	for _, name := range []string{"cpu-alone", "cpu-1", "cpu-2"} {
		if name != "cpu-alone" {
			createPods(t, cs, cpuPod(name))
		}
		p := waitScheduled(t, cs, "default", name)
		if p.Spec.NodeName != "cpu" {
			t.Errorf("pod %s without GPU on node %s, want cpu", name, p.Spec.NodeName)
		}
	}
	gpu := builders.GPUPod("gpu").General("c", 2, 10).Obj()
	gpu.Spec.Tolerations = []corev1.Toleration{{Key: xgn.TaintKey, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	createPods(t, cs, gpu)
	if _, a := waitBound(t, cs, "default", "gpu"); a.Node != "xgn" {
		t.Errorf("GPU pod on %s, want xgn", a.Node)
	}
}

// waitScheduled waits until the pod is bound to a node (any pod, qGPU or not).
func waitScheduled(t *testing.T, cs kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		pod, err = cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && pod.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not bound: %v", ns, name, err)
	}
	return pod
}
