package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// docsOverlay writes the yaml block of docs/install.md's section into
// <dir>/my-qgpu/kustomization.yaml, beside a copy of manifests/, and
// returns the overlay's directory.
func docsOverlay(t *testing.T, root, section, dir string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs/install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, text, _ := strings.Cut(string(doc), "\n## "+section+"\n")
	text, _, _ = strings.Cut(text, "\n## ")
	_, block, ok := strings.Cut(text, "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || !strings.Contains(block, "kind: Kustomization") {
		t.Fatalf("docs/install.md: no overlay under %q", section)
	}
	if err := os.CopyFS(filepath.Join(dir, "manifests"), os.DirFS(filepath.Join(root, "manifests"))); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "my-qgpu")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	return overlay
}

// TestAnotherNamespace applies the overlay docs/install.md gives for a
// namespace of one's own, as written there, with `kubectl apply -k`, to a
// real kube-apiserver with RBAC: nothing lands in qgpu-system, and the
// admission policies know the scheduler and the agent of the new
// namespace (and no longer those of qgpu-system).
func TestAnotherNamespace(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("needs kubectl: %v", err)
	}
	const ns = "gpu-infra"
	root := repoRoot(t)
	work := t.TempDir()
	overlay := docsOverlay(t, root, "Another namespace", work)
	rendered, err := exec.Command(kubectl, "kustomize", overlay).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, rendered)
	}
	// The scheduler's configuration keeps its resourceNamespace (for runs
	// outside a pod); its Deployment's flag overrides it.
	for i, line := range strings.Split(string(rendered), "\n") {
		if strings.Contains(line, "qgpu-system") && strings.TrimSpace(line) != "resourceNamespace: qgpu-system" {
			t.Errorf("rendered line %d still names qgpu-system: %s", i+1, line)
		}
	}
	cp := harness.StartWith(t, harness.ControlPlaneOptions{RBAC: true})
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "-k", overlay).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -k: %v\n%s", err, out)
	}
	ctx := context.Background()
	if _, err := cp.Client.AppsV1().Deployments(ns).Get(ctx, "qgpu-scheduler", metav1.GetOptions{}); err != nil {
		t.Fatalf("the scheduler in %s: %v", ns, err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "target", Namespace: "default"},
		Spec: corev1.PodSpec{SchedulerName: "nobody", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	if pod, err = cp.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// qgpu-system's scheduler has no rights here: RBAC lets it through as a
	// member of system:masters, so that the policy alone judges it. A new
	// pod each try, until the apiserver has loaded the policy.
	old := impersonate(t, cp, "system:serviceaccount:qgpu-system:qgpu-scheduler", "system:masters")
	attempt := 0
	waitPolicy(t, "a pod created with an assignment by qgpu-system's scheduler", "is written by the qgpu-scheduler only", func(ctx context.Context) error {
		attempt++
		p := pod.DeepCopy()
		p.ObjectMeta = metav1.ObjectMeta{Name: fmt.Sprintf("forged-%d", attempt), Namespace: "default",
			Annotations: map[string]string{protocol.AnnotationAssignment: forgedAssignment("x")}}
		_, err := old.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID,
		Annotations: map[string]string{protocol.AnnotationAssignment: forgedAssignment(string(pod.UID))}},
		Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}
	if err := impersonate(t, cp, "system:serviceaccount:"+ns+":qgpu-scheduler").CoreV1().Pods("default").Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Errorf("binding with an assignment as %s's scheduler: %v", ns, err)
	}
	// The agent of the new namespace is held to its own node: an
	// impersonated one carries no node name and is refused for that.
	asAgent := impersonate(t, cp, "system:serviceaccount:"+ns+":qgpu-agent")
	patch := []byte(`{"metadata":{"labels":{"touched":"yes"}}}`)
	waitPolicy(t, "a write of "+ns+"'s agent without a node name", "names no node", func(ctx context.Context) error {
		_, err := asAgent.CoreV1().Pods("default").Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}
