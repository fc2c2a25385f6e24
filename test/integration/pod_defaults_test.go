package integration

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/agent/xgn"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestPodDefaultsPolicy applies manifests/overlays/pod-defaults to a real
// kube-apiserver 1.35 with the MutatingAdmissionPolicy feature gate and the
// v1beta1 API on, as the overlay asks of a cluster, and creates pods of
// every vocabulary and some that must be left alone (server-side dry run:
// admission runs, nothing is stored).
func TestPodDefaultsPolicy(t *testing.T) {
	cp := harness.StartWith(t, harness.ControlPlaneOptions{ExtraFlags: []string{
		"--feature-gates=MutatingAdmissionPolicy=true",
		"--runtime-config=admissionregistration.k8s.io/v1beta1=true",
	}})
	ctx := context.Background()
	objs, err := harness.ReadManifests("manifests/overlays/pod-defaults")
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Apply(ctx, cp.Config, objs, false); err != nil {
		t.Fatalf("applying the overlay: %v", err)
	}
	toleration := corev1.Toleration{Key: xgn.TaintKey, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}
	other := corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	pod := func(name string, res map[string]int64) *corev1.Pod {
		p := builders.GPUPod(name).Container("c", res).Obj()
		p.Spec.SchedulerName = "" // the apiserver defaults it to default-scheduler
		return p
	}
	type want struct {
		Scheduler   string
		Tolerations []corev1.Toleration
	}
	withSched := func(p *corev1.Pod, s string) *corev1.Pod { p.Spec.SchedulerName = s; return p }
	withTol := func(p *corev1.Pod, ts ...corev1.Toleration) *corev1.Pod { p.Spec.Tolerations = ts; return p }
	cases := []struct {
		name string
		pod  *corev1.Pod
		want want
	}{
		{"qgpu", pod("qgpu", map[string]int64{protocol.ResourceMemory: 2, protocol.ResourceCore: 10}), want{protocol.SchedulerName, []corev1.Toleration{toleration}}},
		{"vcuda", pod("vcuda", map[string]int64{"nvidia.com/vcuda-core": 20, "nvidia.com/vcuda-memory": 1000}), want{protocol.SchedulerName, []corev1.Toleration{toleration}}},
		{"t9k node", pod("t9k", map[string]int64{"tensorstack.dev/nvidia-gpu-node": 1}), want{protocol.SchedulerName, []corev1.Toleration{toleration}}},
		{"hami", pod("hami", map[string]int64{"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}), want{protocol.SchedulerName, []corev1.Toleration{toleration}}},
		{"keeps other tolerations", withTol(pod("tol", map[string]int64{"tensorstack.dev/nvidia-gpu": 1}), other),
			want{protocol.SchedulerName, []corev1.Toleration{other, toleration}}},
		{"already tolerates", withTol(pod("has", map[string]int64{"tensorstack.dev/nvidia-gpu": 1}), toleration),
			want{protocol.SchedulerName, []corev1.Toleration{toleration}}},
		{"keeps another scheduler", withSched(pod("volcano", map[string]int64{"nvidia.com/vcuda-core": 20}), "volcano"),
			want{"volcano", []corev1.Toleration{toleration}}},
		{"no GPU", pod("cpu", nil), want{corev1.DefaultSchedulerName, nil}},
		{"NVIDIA device plugin", pod("nvidia", map[string]int64{"nvidia.com/gpu": 1}), want{corev1.DefaultSchedulerName, nil}},
	}
	// The admission plugin picks the policy up from its informer: wait for
	// the first case to be mutated before judging any.
	first := cases[0].pod
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := cp.Client.CoreV1().Pods("default").Create(ctx, first.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && got.Spec.SchedulerName == protocol.SchedulerName, nil
	})
	if err != nil {
		t.Fatalf("the policy never set the schedulerName of %s: %v", first.Name, err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := cp.Client.CoreV1().Pods("default").Create(ctx, c.pod.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Fatal(err)
			}
			var tols []corev1.Toleration
			for _, tol := range got.Spec.Tolerations {
				// The apiserver adds the not-ready/unreachable tolerations
				// only with its DefaultTolerationSeconds plugin: skip those.
				if tol.TolerationSeconds == nil {
					tols = append(tols, tol)
				}
			}
			if diff := cmp.Diff(c.want, want{got.Spec.SchedulerName, tols}); diff != "" {
				t.Errorf("pod after admission (-want +got):\n%s", diff)
			}
		})
	}
}
