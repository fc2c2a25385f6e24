package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// checkReplaceDefault renders the overlay docs/install.md gives with the
// replace-default-scheduler component, as written there, beside a copy of
// manifests/: the scheduler mounts config/qgpu-scheduler-as-default.yaml's
// copy under a name of its own and takes its lease in kube-system, where
// that configuration names kube-scheduler's; the common labels hold.
func checkReplaceDefault(t *testing.T, root string) {
	overlay := docsOverlay(t, root, "Replacing the stock scheduler", t.TempDir())
	shipped := checkConfigHashed(t, "manifests")
	got := checkConfigHashed(t, overlay)
	want, err := os.ReadFile(filepath.Join(root, "manifests/overlays/replace-default-scheduler/config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got[1] != string(want) || got[0] == shipped[0] {
		t.Errorf("ConfigMap %s (manifests/: %s) holds the component's config.yaml: %v", got[0], shipped[0], got[1] == string(want))
	}
	checkCommonLabels(t, overlay)
	objs, err := harness.ReadManifests(overlay)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" || o.GetName() != "qgpu-scheduler" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
		if !slices.Contains(args, "--leader-elect-resource-namespace=kube-system") || slices.ContainsFunc(args, func(a string) bool {
			return strings.Contains(a, "POD_NAMESPACE")
		}) {
			t.Errorf("scheduler args %v, want the lease in kube-system", args)
		}
		return
	}
	t.Error("no qgpu-scheduler Deployment")
}

// checkRouteTaintOverlay renders the overlay docs/install.md gives for
// another GPU taint: the policy's gpuTaint is the overlay's.
func checkRouteTaintOverlay(t *testing.T, root string) {
	overlay := docsOverlay(t, root, "CPU-only pods on GPU nodes", t.TempDir())
	objs, err := harness.ReadManifests(overlay)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "MutatingAdmissionPolicy" || o.GetName() != "qgpu-route-cpu-pods" {
			continue
		}
		vars, _, _ := unstructured.NestedSlice(o.Object, "spec", "variables")
		v := vars[0].(map[string]any)
		if v["name"] != "gpuTaint" || !strings.Contains(v["expression"].(string), "'key': 'sku'") {
			t.Errorf("the policy's first variable after the overlay: %v, want gpuTaint with key sku", v)
		}
		return
	}
	t.Error("the overlay of docs/install.md holds no qgpu-route-cpu-pods policy")
}
