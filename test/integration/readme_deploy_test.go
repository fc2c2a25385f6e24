package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// readmeDeployBlock is the sh block of README.md's "Deploy to a real
// cluster" that applies the manifests, its commands one per entry
// (continuation lines joined).
func readmeDeployBlock(t *testing.T, root string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(raw), "\n## Deploy to a real cluster\n")
	section, _, _ = strings.Cut(section, "\n## ")
	for rest := section; ; {
		var block string
		var ok bool
		if _, rest, ok = strings.Cut(rest, "```sh\n"); !ok {
			break
		}
		block, rest, _ = strings.Cut(rest, "```")
		if !strings.Contains(block, "kubectl apply -k manifests/\n") {
			continue
		}
		var cmds []string
		for _, line := range strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				cmds = append(cmds, line)
			}
		}
		return cmds
	}
	t.Fatal("README.md: no sh block with `kubectl apply -k manifests/` under \"Deploy to a real cluster\"")
	return nil
}

// TestREADMEDeploy runs the README's deploy commands as written, one by
// one, in a copy of the repository's manifests/, against a real
// kube-apiserver with one GPU node: the images must be the ones the first
// command sets, on every workload, the node labelled, the example pod
// admitted and `kubectl qgpu nodes` must show the node's card.
func TestREADMEDeploy(t *testing.T) {
	kustomize := os.Getenv("KUSTOMIZE_BIN")
	if kustomize == "" {
		t.Skip("KUSTOMIZE_BIN not set (make integration builds it: make kustomize)")
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("the README's commands need kubectl: %v", err)
	}
	kubectlQGPU, err := harness.BinaryPath("", "KUBECTL_QGPU_BIN", "kubectl-qgpu")
	if err != nil {
		t.Fatal(err)
	}
	root := repoRoot(t)
	cmds := readmeDeployBlock(t, root)
	cp := harness.Start(t)
	ctx := context.Background()
	node := builders.GPUNode("gpu-0", false, builders.Cards(1, "T4", 16<<10))
	delete(node.Labels, protocol.LabelDeviceEnable) // the README labels it
	if _, err := cp.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if err := os.CopyFS(filepath.Join(work, "manifests"), os.DirFS(filepath.Join(root, "manifests"))); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	// kubectl finds `kubectl qgpu` as kubectl-qgpu on PATH.
	path := strings.Join([]string{filepath.Dir(kustomize), filepath.Dir(kubectlQGPU), filepath.Dir(kubectl), os.Getenv("PATH")}, string(os.PathListSeparator))
	const tag = "v9.9.9"
	var last string
	for _, c := range cmds {
		c = strings.NewReplacer("<tag>", tag, "<gpu-node>", node.Name).Replace(c)
		cmd := exec.Command("bash", "-c", c)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PATH="+path, "KUBECONFIG="+kubeconfig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README command %q: %v\n%s", c, err, out)
		}
		last = string(out)
	}
	checkDeployed(t, cp, tag)
	if !strings.Contains(last, node.Name) || !strings.Contains(last, "T4") {
		t.Errorf("the last command (kubectl qgpu nodes) printed no card of %s:\n%s", node.Name, last)
	}
}

// checkDeployed: every workload runs the images the README's first command
// set, the node carries both labels, and the example pod exists.
func checkDeployed(t *testing.T, cp *harness.ControlPlane, tag string) {
	t.Helper()
	ctx := context.Background()
	deployments, err := cp.Client.AppsV1().Deployments("qgpu-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	daemonSets, err := cp.Client.AppsV1().DaemonSets("qgpu-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{}
	for _, d := range deployments.Items {
		images["Deployment "+d.Name] = d.Spec.Template.Spec.Containers[0].Image
	}
	for _, d := range daemonSets.Items {
		images["DaemonSet "+d.Name] = d.Spec.Template.Spec.Containers[0].Image
	}
	for _, w := range []string{"Deployment qgpu-scheduler", "DaemonSet qgpu-agent", "DaemonSet qgpu-agent-colocation", "DaemonSet qgpu-mps-control-daemon"} {
		image, ok := images[w]
		if !ok || !strings.HasPrefix(image, "registry.example.com/qgpu/") || !strings.HasSuffix(image, ":"+tag) {
			t.Errorf("%s: image %q (present %v), want registry.example.com/qgpu/…:%s", w, image, ok, tag)
		}
	}
	n, err := cp.Client.CoreV1().Nodes().Get(ctx, "gpu-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[protocol.LabelDeviceEnable] != protocol.LabelValueEnable || n.Labels[protocol.LabelMixedEnable] != protocol.LabelValueEnable {
		t.Errorf("node labels %v, want both qGPU labels", n.Labels)
	}
	if _, err := cp.Client.CoreV1().Pods("default").Get(ctx, "general-5g-30c", metav1.GetOptions{}); err != nil {
		t.Errorf("the example pod: %v", err)
	}
}
