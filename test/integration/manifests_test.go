package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestManifestsDryRun sends every manifest to a real API server with
// server-side dry run: the kustomized manifests/ (RBAC, ConfigMap,
// Deployment, DaemonSet), the overlay of it with the
// replace-default-scheduler component that docs/install.md gives, and
// every file of manifests/examples, so schema,
// defaulting and admission all check them, as `kubectl apply
// --dry-run=server` does.
func TestManifestsDryRun(t *testing.T) {
	cp := harness.StartWith(t, harness.ControlPlaneOptions{RBAC: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Dry run does not create the namespace that the others live in.
	ns, err := harness.ReadManifests("manifests/namespace.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Apply(ctx, cp.Config, ns, false); err != nil {
		t.Fatal(err)
	}
	examples, err := filepath.Glob(filepath.Join(repoRoot(t), "manifests/examples/*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append([]string{"manifests"}, examples...) {
		name, err := filepath.Rel(repoRoot(t), p)
		if err != nil {
			name = p
		}
		if filepath.Base(p) == "kustomization.yaml" {
			continue // not an object: built and applied below
		}
		t.Run(name, func(t *testing.T) {
			objs, err := harness.ReadManifests(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) == 0 {
				t.Fatalf("%s holds no objects", p)
			}
			if err := harness.Apply(ctx, cp.Config, objs, true); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("replace-default-scheduler overlay of docs/install.md", func(t *testing.T) {
		objs, err := harness.ReadManifests(docsOverlay(t, repoRoot(t), "Replacing the stock scheduler", t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		if err := harness.Apply(ctx, cp.Config, objs, true); err != nil {
			t.Error(err)
		}
	})
	t.Run("manifests/examples kustomization", func(t *testing.T) {
		objs, err := harness.ReadManifests("manifests/examples")
		if err != nil {
			t.Fatal(err)
		}
		if want := len(examples) - 1; len(objs) != want {
			t.Errorf("the kustomization lists %d of the %d example files", len(objs), want)
		}
		if err := harness.Apply(ctx, cp.Config, objs, true); err != nil {
			t.Error(err)
		}
	})
}

// TestManifestsConfigFresh fails when a configuration the kustomizations
// deploy is not what hack/gen-manifests.sh makes of its profile in config/.
func TestManifestsConfigFresh(t *testing.T) {
	root := repoRoot(t)
	// What the script writes, from what it reads.
	copies := map[string]string{
		"manifests/scheduler/config.yaml":                          "config/qgpu-scheduler.yaml",
		"manifests/overlays/replace-default-scheduler/config.yaml": "config/qgpu-scheduler-as-default.yaml",
	}
	// The script writes in place: run it on a copy of the inputs it reads.
	tmp := t.TempDir()
	inputs := []string{"hack/gen-manifests.sh"}
	for out, in := range copies {
		inputs = append(inputs, in)
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tmp, out)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range inputs {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tmp, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(filepath.Join(tmp, "hack/gen-manifests.sh")).CombinedOutput(); err != nil {
		t.Fatalf("hack/gen-manifests.sh: %v\n%s", err, out)
	}
	for out := range copies {
		want, err := os.ReadFile(filepath.Join(root, out))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(tmp, out))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("%s is stale: run hack/gen-manifests.sh (make manifests) and commit the result.\ngenerated:\n%s", out, got)
		}
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// assertNoForbidden fails if the scheduler or an agent, running with the
// manifests' least-privilege credentials, was denied anything: a verb
// missing from manifests/*/rbac.yaml shows up as a "forbidden" log line.
func assertNoForbidden(t *testing.T, c *harness.Cluster) {
	t.Helper()
	logs := []string{c.SchedulerLogPath()}
	for _, n := range c.Nodes {
		logs = append(logs, n.AgentLogPath())
	}
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(strings.ToLower(line), "forbidden") {
				t.Errorf("%s: %s", filepath.Base(filepath.Dir(p))+"/"+filepath.Base(p), line)
			}
		}
	}
}

// TestManifestImagesArePinned: every image of the shipped manifests names a
// version tag, never :latest or no tag, so a rollout is what was tested and a
// node that pulls again gets the same binary (make images tags with
// `git describe`; a release tags v<x.y.z>).
func TestManifestImagesArePinned(t *testing.T) {
	for _, dir := range []string{"manifests", "manifests/overlays/colocation"} {
		objs, err := harness.ReadManifests(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				image, _ := c.(map[string]any)["image"].(string)
				name, tag, ok := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
				if !ok || tag == "" || tag == "latest" {
					t.Errorf("%s: %s %s: image %q (%s) has no version tag", dir, o.GetKind(), o.GetName(), image, name)
				}
			}
		}
	}
}
