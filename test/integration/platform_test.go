package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// platformAdmission is an apiserver admission configuration as managed
// clusters run it: Pod Security's baseline enforced by default, and GKE's
// rule that pods of the system-*-critical priority classes need a
// ResourceQuota that covers them (ResourceQuota's limitedResources).
const platformAdmission = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: latest
    exemptions: {}
- name: ResourceQuota
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: ResourceQuotaConfiguration
    limitedResources:
    - resource: pods
      matchScopes:
      - scopeName: PriorityClass
        operator: In
        values: [system-node-critical, system-cluster-critical]
`

// TestPlatformAdmission applies manifests/ and the colocation overlay to
// an apiserver that enforces Pod Security baseline by default and GKE's
// critical-pod quota rule, and creates (server-side dry run) a pod from
// every shipped workload's template in its namespace: each is admitted.
// The same pods in a namespace without the quota, or without the Pod
// Security labels, are refused, so the check can fail.
func TestPlatformAdmission(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "admission.yaml")
	if err := os.WriteFile(cfg, []byte(platformAdmission), 0o644); err != nil {
		t.Fatal(err)
	}
	cp := harness.StartWith(t, harness.ControlPlaneOptions{ExtraFlags: []string{"--admission-control-config-file=" + cfg}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var pods []*corev1.Pod
	for _, path := range []string{"manifests", "manifests/overlays/colocation"} {
		objs, err := harness.ReadManifests(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := harness.Apply(ctx, cp.Config, objs, false); err != nil {
			t.Fatalf("applying %s: %v", path, err)
		}
		for _, o := range objs {
			var spec corev1.PodTemplateSpec
			switch o.GetKind() {
			case "Deployment":
				var d appsv1.Deployment
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
					t.Fatal(err)
				}
				spec = d.Spec.Template
			case "DaemonSet":
				var d appsv1.DaemonSet
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
					t.Fatal(err)
				}
				spec = d.Spec.Template
			default:
				continue
			}
			pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: o.GetName(), Namespace: o.GetNamespace(), Labels: spec.Labels}, Spec: spec.Spec})
		}
	}
	if len(pods) < 4 {
		t.Fatalf("%d workloads in manifests/ and the colocation overlay, want the scheduler, two agents and the MPS daemon", len(pods))
	}
	// Each of the two pieces is needed: without the quota every pod is
	// refused; without the labels, the pods that use host namespaces or
	// paths are.
	noQuota := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "no-quota", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	noLabels := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "no-labels"}}
	for _, ns := range []*corev1.Namespace{noQuota, noLabels} {
		if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	quota, err := cp.Client.CoreV1().ResourceQuotas("qgpu-system").Get(ctx, "qgpu-critical-pods", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	quota = &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: quota.Name, Namespace: noLabels.Name}, Spec: quota.Spec}
	if _, err := cp.Client.CoreV1().ResourceQuotas(noLabels.Name).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	create := func(p *corev1.Pod, ns string) error {
		p = p.DeepCopy()
		p.Namespace = ns
		_, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, dry)
		return err
	}
	seen := map[string]bool{}
	for _, p := range pods {
		if seen[p.Name] {
			continue // the base agent again, from the overlay
		}
		seen[p.Name] = true
		t.Run(p.Name, func(t *testing.T) {
			if err := create(p, p.Namespace); err != nil {
				t.Errorf("a pod of %s/%s is refused in its namespace: %v", p.Namespace, p.Name, err)
			}
			if err := create(p, noQuota.Name); !strings.Contains(fmt.Sprint(err), "insufficient quota") {
				t.Errorf("without the quota: %v, want it refused for want of quota", err)
			}
			err := create(p, noLabels.Name)
			if host := usesHost(&p.Spec); host != (err != nil) || host && !strings.Contains(fmt.Sprint(err), "violates PodSecurity") {
				t.Errorf("without the labels (host paths or namespaces: %v): %v", host, err)
			}
		})
	}
}

// usesHost: the pod uses a host path, network, PID or IPC namespace, which
// Pod Security's baseline forbids.
func usesHost(s *corev1.PodSpec) bool {
	for _, v := range s.Volumes {
		if v.HostPath != nil {
			return true
		}
	}
	return s.HostNetwork || s.HostPID || s.HostIPC
}
