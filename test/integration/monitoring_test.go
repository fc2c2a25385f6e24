package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestMonitoringManifests checks the opt-in kustomization
// manifests/monitoring: it ships the dashboard file as it is, for
// Grafana's sidecar; each PodMonitor selects the pods of a shipped
// workload and scrapes a port their container names; the Secret holding
// the scheduler's credentials is there; and every object but the
// PodMonitors (whose CRD comes with the Prometheus Operator) passes a
// server-side dry run.
func TestMonitoringManifests(t *testing.T) {
	mon, err := harness.ReadManifests("manifests/monitoring")
	if err != nil {
		t.Fatal(err)
	}
	base, err := harness.ReadManifests("manifests")
	if err != nil {
		t.Fatal(err)
	}
	checkDashboardConfigMap(t, mon)
	for _, pm := range []struct{ kind, name string }{{"DaemonSet", "qgpu-agent"}, {"Deployment", "qgpu-scheduler"}} {
		checkPodMonitor(t, find(mon, "PodMonitor", pm.name), find(base, pm.kind, pm.name), mon)
	}

	cp := harness.StartWith(t, harness.ControlPlaneOptions{RBAC: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := harness.ReadManifests("manifests/namespace.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Apply(ctx, cp.Config, ns, false); err != nil {
		t.Fatal(err)
	}
	var core []*unstructured.Unstructured
	for _, o := range mon {
		if o.GetKind() != "PodMonitor" {
			core = append(core, o)
		}
	}
	if err := harness.Apply(ctx, cp.Config, core, true); err != nil {
		t.Error(err)
	}
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func checkDashboardConfigMap(t *testing.T, mon []*unstructured.Unstructured) {
	t.Helper()
	const file = "qgpu-dashboard.json"
	cm := find(mon, "ConfigMap", "qgpu-grafana-dashboard")
	if cm == nil {
		t.Fatal("no ConfigMap qgpu-grafana-dashboard")
	}
	want, err := os.ReadFile(filepath.Join(repoRoot(t), "manifests/monitoring", file))
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(cm.Object, "data", file); got != string(want) {
		t.Errorf("ConfigMap data %s differs from the file", file)
	}
	if cm.GetLabels()["grafana_dashboard"] != "1" || cm.GetNamespace() != "qgpu-system" {
		t.Errorf("ConfigMap labels %v in %q, want grafana_dashboard=1 in qgpu-system", cm.GetLabels(), cm.GetNamespace())
	}
}

func checkPodMonitor(t *testing.T, pm, workload *unstructured.Unstructured, mon []*unstructured.Unstructured) {
	t.Helper()
	if pm == nil || workload == nil {
		t.Fatalf("a PodMonitor or its workload is missing: %v, %v", pm, workload)
	}
	if pm.GetNamespace() != workload.GetNamespace() {
		t.Errorf("PodMonitor %s in %q, its pods in %q", pm.GetName(), pm.GetNamespace(), workload.GetNamespace())
	}
	sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	podLabels, _, _ := unstructured.NestedStringMap(workload.Object, "spec", "template", "metadata", "labels")
	if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(podLabels)) {
		t.Errorf("PodMonitor %s selects %v, the pods of %s are labelled %v", pm.GetName(), sel, workload.GetName(), podLabels)
	}
	ports := map[string]bool{}
	containers, _, _ := unstructured.NestedSlice(workload.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		cps, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
		for _, p := range cps {
			name, _ := p.(map[string]any)["name"].(string)
			ports[name] = true
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(endpoints) == 0 {
		t.Errorf("PodMonitor %s has no endpoint", pm.GetName())
	}
	for _, e := range endpoints {
		em := e.(map[string]any)
		if port, _ := em["port"].(string); !ports[port] {
			t.Errorf("PodMonitor %s scrapes port %q; the containers of %s name %v", pm.GetName(), port, workload.GetName(), ports)
		}
		secret, _, _ := unstructured.NestedString(em, "authorization", "credentials", "name")
		if secret != "" && find(mon, "Secret", secret) == nil {
			t.Errorf("PodMonitor %s reads its token from Secret %s, which the kustomization lacks", pm.GetName(), secret)
		}
	}
}
