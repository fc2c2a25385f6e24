package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// stockProfile is kube-scheduler's default profile under another name,
// run by the same binary: what the stock scheduler would do.
const stockProfile = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: stock-scheduler
`

// TestAsDefaultScheduler runs the scheduler binary with
// config/qgpu-scheduler-as-default.yaml against a real apiserver, on a CPU
// node that is nearly full and a GPU node with two free cards, its CPU
// free and the pods' image. A CPU-only pod that names no scheduler goes to the CPU node, where
// it strands no card, although kube-scheduler's default profile (run beside
// it as stock-scheduler, leader election off) puts the same pod on the GPU
// node, the least allocated. The process holds kube-scheduler's lease, not
// qGPU's. qGPU pods of both profiles book one ledger: one through
// qgpu-scheduler and one through default-scheduler take a card each (8 of
// 14 GiB), and a third finds no card with room.
func TestAsDefaultScheduler(t *testing.T) {
	cp := harness.Start(t)
	cs := cp.Client
	harness.StartQGPUScheduler(t, cp, "config/qgpu-scheduler-as-default.yaml")
	stock := filepath.Join(t.TempDir(), "stock.yaml")
	if err := os.WriteFile(stock, []byte(stockProfile), 0o644); err != nil {
		t.Fatal(err)
	}
	harness.StartQGPUScheduler(t, cp, stock)

	// The GPU node also holds the pods' image (3 GB): the default
	// profile's resource scores then favour it by more than one weight of
	// QGPU's (LeastAllocated about 90, ImageLocality 100).
	gpu := builders.GPUNode("gpu", false, builders.Cards(2, "Tesla-T4", t4MiB))
	gpu.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.k8s.io/pause:3.10"}, SizeBytes: 3 << 30}}
	createNodes(t, cs, cpuNode("cpu", "8"), gpu)
	busy := cpuOnlyPod("busy", 7000)
	busy.Spec.NodeName = "cpu"
	createPods(t, cs, busy)

	control := cpuOnlyPod("control", 1000)
	control.Spec.SchedulerName = "stock-scheduler"
	createPods(t, cs, control)
	if got := waitScheduled(t, cs, "default", "control").Spec.NodeName; got != "gpu" {
		t.Fatalf("the stock profile put the CPU-only pod on %s: the case needs it on gpu (least allocated)", got)
	}
	deletePod(t, cs, control)
	waitGone(t, cs, control)

	pod := cpuOnlyPod("cpu-only", 1000)
	pod.Spec.SchedulerName = "" // the apiserver defaults it to default-scheduler
	createPods(t, cs, pod)
	got := waitScheduled(t, cs, "default", "cpu-only")
	if got.Spec.SchedulerName != corev1.DefaultSchedulerName || got.Spec.NodeName != "cpu" {
		t.Errorf("pod of %s on %s, want default-scheduler's on cpu, where it strands no card", got.Spec.SchedulerName, got.Spec.NodeName)
	}
	checkLeases(t, cs)

	qgpu := builders.GPUPod("by-qgpu").General("c", 8, 20).Obj()
	def := builders.GPUPod("by-default").General("c", 8, 20).Obj()
	def.Spec.SchedulerName = ""
	for _, p := range []*corev1.Pod{qgpu, def} {
		createPods(t, cs, p)
		if _, a := waitBound(t, cs, p.Namespace, p.Name); a.Node != "gpu" {
			t.Errorf("%s on %s, want gpu", p.Name, a.Node)
		}
	}
	third := builders.GPUPod("third").General("c", 8, 20).Obj()
	createPods(t, cs, third)
	waitFailedScheduling(t, cs, third.Namespace, third.Name)
	checkCluster(t, cs)
}

// checkLeases: the scheduler took kube-scheduler's lease, and not qGPU's.
func checkLeases(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, "kube-scheduler", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		t.Errorf("lease kube-system/kube-scheduler: %v, err %v: want one held", l, err)
	}
	if _, err := cs.CoordinationV1().Leases("qgpu-system").Get(ctx, protocol.SchedulerName, metav1.GetOptions{}); !errors.IsNotFound(err) {
		t.Errorf("lease qgpu-system/qgpu-scheduler: %v, want none", err)
	}
}

// cpuNode is a node without cards: CPU, memory and room for pods.
func cpuNode(name, cpu string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// cpuOnlyPod asks for CPU and nothing else, of qgpu-scheduler.
func cpuOnlyPod(name string, milli int64) *corev1.Pod {
	return builders.GPUPod(name).CPU(milli).Obj()
}

// waitGone waits until the pod is gone.
func waitGone(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return errors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not gone: %v", pod.Namespace, pod.Name, err)
	}
}
