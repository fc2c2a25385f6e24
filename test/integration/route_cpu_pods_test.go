package integration

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/agent/xgn"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestRouteCPUPodsPolicy applies manifests/overlays/route-cpu-pods beside
// manifests/overlays/pod-defaults to a real kube-apiserver 1.35 with the
// MutatingAdmissionPolicy feature gate and the v1beta1 API on, and creates
// pods by server-side dry run: only pods left to the default scheduler that
// ask for no GPU and tolerate the policy's taint (nvidia.com/gpu=present:
// NoSchedule) go to qgpu-scheduler; qGPU pods are pod-defaults' as before.
func TestRouteCPUPodsPolicy(t *testing.T) {
	cp := harness.StartWith(t, harness.ControlPlaneOptions{ExtraFlags: []string{
		"--feature-gates=MutatingAdmissionPolicy=true",
		"--runtime-config=admissionregistration.k8s.io/v1beta1=true",
	}})
	ctx := context.Background()
	objs, err := harness.ReadManifests("manifests/namespace.yaml", "manifests/overlays/route-cpu-pods", "manifests/overlays/pod-defaults")
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Apply(ctx, cp.Config, objs, false); err != nil {
		t.Fatalf("applying the overlays: %v", err)
	}
	ignored := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "opted-out", Labels: map[string]string{"qgpu.io/admission": "ignore"}}}
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, ignored, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gpuTaint := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	cases := routeCases(gpuTaint)
	// The admission plugin picks the policy up from its informer: wait for
	// the first case to be mutated before judging any.
	first := cases[0]
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := cp.Client.CoreV1().Pods(first.pod.Namespace).Create(ctx, first.pod.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && got.Spec.SchedulerName == protocol.SchedulerName, nil
	})
	if err != nil {
		t.Fatalf("the policy never set the schedulerName of %s: %v", first.name, err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := cp.Client.CoreV1().Pods(c.pod.Namespace).Create(ctx, c.pod.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Fatal(err)
			}
			want := c.pod.Spec.Tolerations
			if c.xgn {
				want = append(append([]corev1.Toleration(nil), want...), corev1.Toleration{Key: xgn.TaintKey, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule})
			}
			var tols []corev1.Toleration
			for _, tol := range got.Spec.Tolerations {
				// The not-ready/unreachable tolerations come only with the
				// DefaultTolerationSeconds plugin: skip those.
				if tol.TolerationSeconds == nil {
					tols = append(tols, tol)
				}
			}
			if diff := cmp.Diff(c.scheduler, got.Spec.SchedulerName); diff != "" {
				t.Errorf("schedulerName after admission (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want, tols); diff != "" {
				t.Errorf("tolerations after admission (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("taint set by the overlay of docs/install.md", func(t *testing.T) { checkRouteTaintPatched(t, cp, gpuTaint) })
}

// checkRouteTaintPatched applies the overlay docs/install.md gives for
// another GPU taint (sku=gpu:NoSchedule): a CPU-only pod that tolerates it
// goes to qgpu-scheduler, one that tolerates only nvidia.com/gpu no longer.
func checkRouteTaintPatched(t *testing.T, cp *harness.ControlPlane, old corev1.Toleration) {
	ctx := context.Background()
	objs, err := harness.ReadManifests(docsOverlay(t, repoRoot(t), "CPU-only pods on GPU nodes", t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Apply(ctx, cp.Config, objs, false); err != nil {
		t.Fatalf("applying the overlay of docs/install.md: %v", err)
	}
	cases := routeCases(corev1.Toleration{Key: "sku", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
	sku, nvidia := cases[0].pod, routeCases(old)[0].pod
	scheduler := func(ctx context.Context, p *corev1.Pod) (string, error) {
		got, err := cp.Client.CoreV1().Pods(p.Namespace).Create(ctx, p.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return "", err
		}
		return got.Spec.SchedulerName, nil
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := scheduler(ctx, sku)
		return err == nil && s == protocol.SchedulerName, nil
	})
	if err != nil {
		t.Fatalf("a pod tolerating sku=gpu:NoSchedule was never routed: %v", err)
	}
	if s, err := scheduler(ctx, nvidia); err != nil || s != corev1.DefaultSchedulerName {
		t.Errorf("a pod tolerating only nvidia.com/gpu went to %q (err %v), want %s", s, err, corev1.DefaultSchedulerName)
	}
}

type routeCase struct {
	name      string
	pod       *corev1.Pod
	scheduler string
	// xgn: pod-defaults adds the xgn toleration (a qGPU pod).
	xgn bool
}

// routeCases are the pods TestRouteCPUPodsPolicy creates; the first must be
// routed.
func routeCases(gpuTaint corev1.Toleration) []routeCase {
	// A CPU-only pod left to the default scheduler with the tolerations given.
	cpu := func(name string, tols ...corev1.Toleration) *corev1.Pod {
		p := builders.GPUPod(name).CPU(500).Obj()
		p.Spec.SchedulerName = "" // the apiserver defaults it to default-scheduler
		p.Spec.Tolerations = tols
		return p
	}
	with := func(p *corev1.Pod, f func(*corev1.Pod)) *corev1.Pod { f(p); return p }
	addResource := func(c *corev1.Container, name string, q string) {
		c.Resources.Limits[corev1.ResourceName(name)] = resource.MustParse(q)
		c.Resources.Requests[corev1.ResourceName(name)] = resource.MustParse(q)
	}
	const qgpu = protocol.SchedulerName
	def := corev1.DefaultSchedulerName
	return []routeCase{
		{name: "tolerates the key", pod: cpu("exists", gpuTaint), scheduler: qgpu},
		{name: "tolerates the value", pod: cpu("equal", corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpEqual, Value: "present", Effect: corev1.TaintEffectNoSchedule}), scheduler: qgpu},
		{name: "operator left empty means Equal", pod: cpu("empty-op", corev1.Toleration{Key: "nvidia.com/gpu", Value: "present"}), scheduler: qgpu},
		{name: "every effect", pod: cpu("any-effect", corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}), scheduler: qgpu},
		{name: "every taint", pod: cpu("everything", corev1.Toleration{Operator: corev1.TolerationOpExists}), scheduler: qgpu},
		{name: "native resources only", pod: with(cpu("native", gpuTaint), func(p *corev1.Pod) {
			addResource(&p.Spec.Containers[0], "memory", "1Gi")
			addResource(&p.Spec.Containers[0], "ephemeral-storage", "1Gi")
			addResource(&p.Spec.Containers[0], "hugepages-2Mi", "4Mi")
		}), scheduler: qgpu},
		{name: "another value", pod: cpu("other-value", corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}), scheduler: def},
		{name: "another effect", pod: cpu("no-execute", corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}), scheduler: def},
		{name: "another taint", pod: cpu("other-key", corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}), scheduler: def},
		{name: "no tolerations", pod: cpu("none"), scheduler: def},
		{name: "another scheduler named", pod: with(cpu("volcano", gpuTaint), func(p *corev1.Pod) { p.Spec.SchedulerName = "volcano" }), scheduler: "volcano"},
		// The opt-out is the namespace's: a pod's own label is ignored.
		{name: "pod label does not opt out", pod: with(cpu("opt-out", gpuTaint), func(p *corev1.Pod) { p.Labels = map[string]string{"qgpu.io/admission": "ignore"} }), scheduler: qgpu},
		{name: "opted-out namespace", pod: with(cpu("in-opted-out", gpuTaint), func(p *corev1.Pod) { p.Namespace = "opted-out" }), scheduler: def},
		{name: "kube-system", pod: with(cpu("system", gpuTaint), func(p *corev1.Pod) { p.Namespace = "kube-system" }), scheduler: def},
		{name: "qgpu-system", pod: with(cpu("ours", gpuTaint), func(p *corev1.Pod) { p.Namespace = "qgpu-system" }), scheduler: def},
		{name: "names its node", pod: with(cpu("pinned", gpuTaint), func(p *corev1.Pod) { p.Spec.NodeName = "n1" }), scheduler: def},
		{name: "a DaemonSet's", pod: with(cpu("ds", gpuTaint), func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "uid-ds", Controller: ptr.To(true)}}
		}), scheduler: def},
		{name: "a ReplicaSet's", pod: with(cpu("rs", gpuTaint), func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "uid-rs", Controller: ptr.To(true)}}
		}), scheduler: qgpu},
		{name: "NVIDIA device plugin", pod: with(cpu("nvidia", gpuTaint), func(p *corev1.Pod) { addResource(&p.Spec.Containers[0], "nvidia.com/gpu", "1") }), scheduler: def},
		{name: "GPU in an init container", pod: with(cpu("init", gpuTaint), func(p *corev1.Pod) {
			init := *p.Spec.Containers[0].DeepCopy()
			init.Name = "init"
			addResource(&init, "nvidia.com/gpu", "1")
			p.Spec.InitContainers = []corev1.Container{init}
		}), scheduler: def},
		{name: "a ResourceClaim", pod: with(cpu("claims", gpuTaint), func(p *corev1.Pod) {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("a-claim")}}
		}), scheduler: def},
		{name: "qGPU pod: pod-defaults'", pod: with(cpu("qgpu", gpuTaint), func(p *corev1.Pod) {
			addResource(&p.Spec.Containers[0], protocol.ResourceMemory, "2")
			addResource(&p.Spec.Containers[0], protocol.ResourceCore, "10")
		}), scheduler: qgpu, xgn: true},
	}
}
