package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/cmd/kubectl-qgpu/app"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestKubectlQGPUNamespaceScoped runs kubectl-qgpu against a real apiserver
// with RBAC as a user whose only right is to list pods in team-a: `pods -n
// team-a -o json` lists team-a's qGPU pods with their slices; what needs
// more (other namespaces, nodes) fails or degrades with a message that
// says which right is missing.
func TestKubectlQGPUNamespaceScoped(t *testing.T) {
	cp := harness.StartWith(t, harness.ControlPlaneOptions{RBAC: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := cp.Client
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, builders.GPUNode("n1", false, builders.Cards(1, "T4", 16<<10)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createBoundPod(ctx, t, admin, builders.GPUPod("a").Namespace("team-a").General("c", 4, 10).Obj(), 4, 10)
	createBoundPod(ctx, t, admin, builders.GPUPod("b").Namespace("team-b").General("c", 8, 20).Obj(), 8, 20)
	grantPodReader(ctx, t, admin, "team-a", "alice")
	kubeconfig := filepath.Join(t.TempDir(), "alice.kubeconfig")
	if err := cp.KubeconfigForUser(kubeconfig, "alice"); err != nil {
		t.Fatal(err)
	}

	out, errOut, err := runKubectlQGPU(ctx, kubeconfig, "pods", "-n", "team-a", "-o", "json")
	if err != nil {
		t.Fatalf("pods -n team-a -o json as alice: %v (stderr %s)", err, errOut)
	}
	var list app.PodSlicesList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if list.APIVersion != "kubectl.qgpu.io/v1alpha1" || list.Kind != "PodSlicesList" || len(list.Items) != 1 {
		t.Fatalf("got %s, want one item of kubectl.qgpu.io/v1alpha1 PodSlicesList", out)
	}
	got := list.Items[0]
	if got.Namespace != "team-a" || got.Name != "a" || got.NodeName != "n1" || got.Problem != "" ||
		len(got.Assigned) != 1 || len(got.Assigned[0].Slices) != 1 || got.Assigned[0].Slices[0].MemoryGiB != 4 {
		t.Errorf("got %+v, want team-a/a on n1 holding 4 GiB of card 0", got)
	}
	if errOut != "" {
		t.Errorf("stderr %q, want none", errOut)
	}

	// -o wide wants the node's card models: alice may not read nodes, so
	// the table comes with a warning instead.
	out, errOut, err = runKubectlQGPU(ctx, kubeconfig, "pods", "-n", "team-a", "-o", "wide")
	if err != nil || !strings.Contains(out, "c:0=4G/10") || !strings.Contains(errOut, "reading node n1: forbidden for your credentials") {
		t.Errorf("pods -o wide: %v, stdout %q, stderr %q; want the table and a warning that nodes are forbidden", err, out, errOut)
	}
	for _, args := range [][]string{{"pods", "-n", "team-b"}, {"pods", "-A"}, {"nodes"}, {"check"}} {
		_, _, err := runKubectlQGPU(ctx, kubeconfig, args...)
		if err == nil || !strings.Contains(err.Error(), "forbidden for your credentials") {
			t.Errorf("%v as alice: %v, want an error saying the right is missing", args, err)
			continue
		}
		t.Logf("%v as alice: %v", args, err)
	}
}

// runKubectlQGPU runs the plugin's command as kubectl would run the binary.
func runKubectlQGPU(ctx context.Context, kubeconfig string, args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	cmd := app.NewCommand(genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
	err := cmd.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// createBoundPod creates pod bound to n1 and writes the scheduler's
// assignment for its UID: one slice of card 0.
func createBoundPod(ctx context.Context, t *testing.T, c kubernetes.Interface, pod *v1.Pod, gib, cores int64) {
	t.Helper()
	pod.UID, pod.Spec.NodeName = "", "n1"
	created, err := c.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(created.UID), Node: "n1", Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{{Index: 0, UUID: "GPU-T4-00", MemoryGiB: gib, Cores: cores}}}}}
	raw, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if created.Annotations == nil {
		created.Annotations = map[string]string{}
	}
	created.Annotations[protocol.AnnotationAssignment] = raw
	if _, err := c.CoreV1().Pods(pod.Namespace).Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// grantPodReader lets user list and get pods in ns, and nothing else.
func grantPodReader(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, user string) {
	t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pod-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}}}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pod-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer learns the binding from its informer: wait until it allows.
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "list", Resource: "pods"}}}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		r, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, nil
	})
	if err != nil {
		t.Fatalf("%s never allowed to list pods in %s: %v", user, ns, err)
	}
}
