package integration

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// shippedImages are the images the manifests name, before a user points
// them at a registry (manifests/images).
var shippedImages = []string{"ghcr.io/qgpu-scheduler/qgpu-scheduler", "ghcr.io/qgpu-scheduler/qgpu-agent"}

// kustomizations are the directories under manifests/ that hold a
// Kustomization (not a Component), relative to root.
func kustomizations(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(filepath.Join(root, "manifests"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "kustomization.yaml" {
			return err
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var k types.Kustomization
		if err := yaml.Unmarshal(raw, &k); err != nil {
			return err
		}
		if k.Kind != types.ComponentKind {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			dirs = append(dirs, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestKustomizations renders every kustomization under manifests/ as
// `kubectl kustomize` does and checks what an operator relies on: each
// workload's selector selects its own pod template; every image is a
// shipped one (or the examples' pause); no overlay holds a workload of its
// own (each is made from a base object by a patch); the PodMonitors select
// the pods of every agent DaemonSet; and images set in manifests/images
// (what `kustomize edit set image` writes there) reach every workload of
// manifests/ and of the colocation overlay.
func TestKustomizations(t *testing.T) {
	root := repoRoot(t)
	dirs := kustomizations(t, root)
	if len(dirs) < 8 {
		t.Fatalf("found %d kustomizations under manifests/: %v", len(dirs), dirs)
	}
	var agents []*unstructured.Unstructured
	for _, dir := range dirs {
		objs, err := harness.ReadManifests(dir)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		for _, o := range objs {
			checkWorkload(t, dir, o)
			if o.GetKind() == "DaemonSet" && strings.HasPrefix(o.GetName(), "qgpu-agent") {
				agents = append(agents, o)
			}
		}
	}
	t.Run("no workload defined in an overlay", func(t *testing.T) {
		files, _ := filepath.Glob(filepath.Join(root, "manifests/overlays/*/*.yaml"))
		deeper, _ := filepath.Glob(filepath.Join(root, "manifests/overlays/*/*/*.yaml"))
		for _, f := range append(files, deeper...) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range []string{"kind: DaemonSet", "kind: Deployment"} {
				if strings.Contains(string(raw), "\n"+kind) || strings.HasPrefix(string(raw), kind) {
					t.Errorf("%s defines a %s: overlays patch the base's", f, strings.TrimPrefix(kind, "kind: "))
				}
			}
		}
	})
	t.Run("PodMonitors select every agent", func(t *testing.T) {
		monitors, err := harness.ReadManifests("manifests/monitoring")
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, a := range agents {
			names[a.GetName()] = true
			podLabels, _, _ := unstructured.NestedStringMap(a.Object, "spec", "template", "metadata", "labels")
			selected := false
			for _, m := range monitors {
				sel, ok, _ := unstructured.NestedStringMap(m.Object, "spec", "selector", "matchLabels")
				if ok && m.GetKind() == "PodMonitor" && labels.SelectorFromSet(sel).Matches(labels.Set(podLabels)) {
					selected = true
				}
			}
			if !selected {
				t.Errorf("no PodMonitor selects the pods of DaemonSet %s (labels %v)", a.GetName(), podLabels)
			}
		}
		if !names["qgpu-agent"] || !names["qgpu-agent-colocation"] {
			t.Errorf("agent DaemonSets %v, want qgpu-agent and qgpu-agent-colocation", names)
		}
	})
	t.Run("images set in manifests/images reach every workload", func(t *testing.T) { checkImagesReach(t, root) })
	t.Run("scheduler configuration named by its hash", func(t *testing.T) {
		shipped := checkConfigHashed(t, "manifests")
		checkConfigOverlay(t, root, shipped)
	})
	t.Run("replace-default-scheduler overlay of docs/install.md", func(t *testing.T) { checkReplaceDefault(t, root) })
	t.Run("route-cpu-pods overlay of docs/install.md", func(t *testing.T) { checkRouteTaintOverlay(t, root) })
	t.Run("common labels", func(t *testing.T) {
		for _, dir := range []string{"manifests", "manifests/overlays/colocation", "manifests/monitoring", "manifests/uninstall"} {
			checkCommonLabels(t, dir)
		}
	})
}

// checkConfigHashed: the scheduler's ConfigMap is generated with a hash
// suffix (a changed configuration is a new ConfigMap, and the Deployment
// mounting it rolls), and the Deployment mounts that very name. It
// returns the ConfigMap's name and its config.yaml.
func checkConfigHashed(t *testing.T, dir string) [2]string {
	objs, err := harness.ReadManifests(dir)
	if err != nil {
		t.Fatal(err)
	}
	var config, data, mounted string
	for _, o := range objs {
		switch {
		case o.GetKind() == "ConfigMap" && strings.HasPrefix(o.GetName(), "qgpu-scheduler-config"):
			if config != "" {
				t.Errorf("%s: two scheduler ConfigMaps, %s and %s", dir, config, o.GetName())
			}
			config = o.GetName()
			data, _, _ = unstructured.NestedString(o.Object, "data", "config.yaml")
		case o.GetKind() == "Deployment" && o.GetName() == "qgpu-scheduler":
			vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
			for _, v := range vols {
				if name, ok, _ := unstructured.NestedString(v.(map[string]any), "configMap", "name"); ok {
					mounted = name
				}
			}
		}
	}
	if !strings.HasPrefix(config, "qgpu-scheduler-config-") || mounted != config {
		t.Errorf("%s: scheduler ConfigMap %q, mounted %q: want qgpu-scheduler-config-<hash>, mounted by the Deployment", dir, config, mounted)
	}
	return [2]string{config, data}
}

// checkConfigOverlay renders the overlay docs/install.md gives for a
// configuration of one's own, as written there, beside a copy of
// manifests/: the configuration is the overlay's, under a new name, and
// the Deployment mounts it.
func checkConfigOverlay(t *testing.T, root string, shipped [2]string) {
	overlay := docsOverlay(t, root, "Scheduler configuration", t.TempDir())
	mine := strings.Replace(shipped[1], "maxPodsPerCard: 0", "maxPodsPerCard: 7", 1)
	if mine == shipped[1] {
		t.Fatal("the shipped configuration has no \"maxPodsPerCard: 0\" to change")
	}
	if err := os.WriteFile(filepath.Join(overlay, "config.yaml"), []byte(mine), 0o644); err != nil {
		t.Fatal(err)
	}
	got := checkConfigHashed(t, overlay)
	if got[1] != mine || got[0] == shipped[0] {
		t.Errorf("the overlay of docs/install.md rendered ConfigMap %s (shipped %s) with the overlay's configuration %v", got[0], shipped[0], got[1] == mine)
	}
}

// checkCommonLabels: every object of dir carries app.kubernetes.io/part-of,
// and every workload's pods carry it and an app.kubernetes.io/name.
func checkCommonLabels(t *testing.T, dir string) {
	objs, err := harness.ReadManifests(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetLabels()["app.kubernetes.io/part-of"] != "qgpu-scheduler" {
			t.Errorf("%s: %s %s has no app.kubernetes.io/part-of=qgpu-scheduler (labels %v)", dir, o.GetKind(), o.GetName(), o.GetLabels())
		}
		if o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet" {
			continue
		}
		pod, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		if pod["app.kubernetes.io/part-of"] == "" || pod["app.kubernetes.io/name"] == "" {
			t.Errorf("%s: %s %s: its pods' labels %v lack app.kubernetes.io/part-of or app.kubernetes.io/name", dir, o.GetKind(), o.GetName(), pod)
		}
	}
}

// checkWorkload: a Deployment's or DaemonSet's selector selects its
// template, and its containers run shipped images (examples: pause).
func checkWorkload(t *testing.T, dir string, o *unstructured.Unstructured) {
	t.Helper()
	if o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet" {
		return
	}
	sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
	tmpl, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
	if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(tmpl)) {
		t.Errorf("%s: %s %s: selector %v does not select its template's labels %v", dir, o.GetKind(), o.GetName(), sel, tmpl)
	}
	for _, image := range workloadImages(o) {
		name, _, _ := strings.Cut(image, ":")
		if !slices.Contains(shippedImages, name) {
			t.Errorf("%s: %s %s: image %q is not one of the shipped images %v", dir, o.GetKind(), o.GetName(), image, shippedImages)
		}
	}
}

func workloadImages(o *unstructured.Unstructured) []string {
	var out []string
	for _, field := range []string{"initContainers", "containers"} {
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
		for _, c := range cs {
			if image, ok := c.(map[string]any)["image"].(string); ok {
				out = append(out, image)
			}
		}
	}
	return out
}

// checkImagesReach copies manifests/ aside, writes newName and newTag for
// both images into the copy's manifests/images component (as `kustomize
// edit set image` would), and renders manifests/ and the colocation
// overlay: every workload's image must be the new one.
func checkImagesReach(t *testing.T, root string) {
	tmp := t.TempDir()
	if err := os.CopyFS(filepath.Join(tmp, "manifests"), os.DirFS(filepath.Join(root, "manifests"))); err != nil {
		t.Fatal(err)
	}
	comp := filepath.Join(tmp, "manifests/images/kustomization.yaml")
	raw, err := os.ReadFile(comp)
	if err != nil {
		t.Fatal(err)
	}
	var k types.Kustomization
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	if len(k.Images) != len(shippedImages) {
		t.Fatalf("manifests/images lists %d images, want %v", len(k.Images), shippedImages)
	}
	for i := range k.Images {
		k.Images[i].NewName = "registry.example.com/qgpu/" + filepath.Base(k.Images[i].Name)
		k.Images[i].NewTag = "v9.9.9"
	}
	out, err := yaml.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(comp, out, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"manifests", "manifests/overlays/colocation"} {
		objs, err := harness.ReadManifests(filepath.Join(tmp, dir))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, o := range objs {
			for _, image := range workloadImages(o) {
				n++
				if !strings.HasPrefix(image, "registry.example.com/qgpu/") || !strings.HasSuffix(image, ":v9.9.9") {
					t.Errorf("%s: %s %s: image %q was not replaced", dir, o.GetKind(), o.GetName(), image)
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: no workload images", dir)
		}
	}
}
