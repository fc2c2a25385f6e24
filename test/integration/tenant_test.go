package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// A tenant as docs/security.md has it: someone who may create pods and
// ResourceClaims in their own namespace and nothing else.
const (
	tenantUser      = "tenant-alice"
	tenantNamespace = "tenant-a"
	// optedOutNamespace is one the administrator labelled
	// qgpu.io/admission=ignore, for another GPU stack's pods.
	optedOutNamespace = "gpu-stack"
)

// startTenantCluster is a control plane with RBAC and manifests/ applied,
// GPU Operator's RuntimeClass nvidia, the tenant's namespace and role, and
// the administrator's opted-out namespace. It returns the control plane and
// a client acting as the tenant.
func startTenantCluster(t *testing.T) (*harness.ControlPlane, kubernetes.Interface) {
	t.Helper()
	cp := harness.StartWith(t, harness.ControlPlaneOptions{RBAC: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	objs, err := harness.ReadManifests("manifests")
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Apply(ctx, cp.Config, objs, false); err != nil {
		t.Fatalf("applying manifests/: %v", err)
	}
	cs := cp.Client
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: tenantNamespace}},
		{ObjectMeta: metav1.ObjectMeta{Name: optedOutNamespace, Labels: map[string]string{"qgpu.io/admission": "ignore"}}},
	} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: nvidiaRuntimeClass}, Handler: nvidiaRuntimeClass}
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: tenantNamespace},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}},
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"*"}},
		}}
	if _, err := cs.RbacV1().Roles(tenantNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: tenantNamespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: tenantUser}}}
	if _, err := cs.RbacV1().RoleBindings(tenantNamespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cp, impersonate(t, cp, tenantUser)
}

const nvidiaRuntimeClass = "nvidia"

// waitRefusedBy creates p (server-side dry run) until the policy refuses
// it: the apiserver enforces a policy once its informer has it.
func waitRefusedBy(t *testing.T, cs kubernetes.Interface, p *corev1.Pod, policy string) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = createDry(ctx, cs, p)
		return contains(last, "ValidatingAdmissionPolicy '"+policy+"'"), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: %v, want a refusal by %s", p.Namespace, p.Name, last, policy)
	}
}

// checkRefusal: err is the policy's refusal starting with want, or no
// error when want is "".
func checkRefusal(t *testing.T, err error, policy, want string) {
	t.Helper()
	msg, refused := harness.AdmissionRefusal(err)
	switch {
	case want == "" && err != nil:
		t.Errorf("refused: %v", err)
	case want == "":
	case !refused || !contains(err, "ValidatingAdmissionPolicy '"+policy+"'"):
		t.Errorf("%v, want a refusal by %s starting with %q", err, policy, want)
	case !strings.HasPrefix(msg, want):
		t.Errorf("refusal %q, want it to start with %q", msg, want)
	}
}

// TestTenantCannotOptOut: the opt-out of qGPU's pod policies is the
// namespace label qgpu.io/admission=ignore, which only whoever may write
// Namespaces (an administrator) sets. The same label on the tenant's own
// pod opts out of nothing, so the tenant cannot take every card with
// NVIDIA's RuntimeClass and NVIDIA_VISIBLE_DEVICES=all, nor leave a qGPU
// pod to the default scheduler; in the administrator's labelled namespace
// both pass.
func TestTenantCannotOptOut(t *testing.T) {
	cp, tenant := startTenantCluster(t)
	ctx := context.Background()
	ignore := map[string]string{"qgpu.io/admission": "ignore"}
	allCards := func(ns string, lbls map[string]string) *corev1.Pod {
		p := builders.GPUPod("all-cards").Namespace(ns).Container("c", nil).Obj()
		p.Labels = lbls
		p.Spec.RuntimeClassName = ptr.To(nvidiaRuntimeClass)
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
		return p
	}
	unscheduled := func(ns string, lbls map[string]string) *corev1.Pod {
		p := builders.GPUPod("default-scheduler").Namespace(ns).General("c", 4, 30).Obj()
		p.Labels = lbls
		p.Spec.SchedulerName = ""
		return p
	}
	waitRefusedBy(t, tenant, allCards(tenantNamespace, nil), "qgpu-nvidia-runtime-class")
	waitRefusedBy(t, tenant, unscheduled(tenantNamespace, nil), "qgpu-require-scheduler")

	t.Run("the tenant's pod label opts out of nothing", func(t *testing.T) {
		_, err := createDry(ctx, tenant, allCards(tenantNamespace, ignore))
		checkRefusal(t, err, "qgpu-nvidia-runtime-class", "spec.runtimeClassName: nvidia gives a container every card")
		_, err = createDry(ctx, tenant, unscheduled(tenantNamespace, ignore))
		checkRefusal(t, err, "qgpu-require-scheduler", `pod asks for qGPU resources but spec.schedulerName is "default-scheduler"`)
	})
	t.Run("the tenant cannot label its namespace", func(t *testing.T) {
		patch := []byte(`{"metadata":{"labels":{"qgpu.io/admission":"ignore"}}}`)
		_, err := tenant.CoreV1().Namespaces().Patch(ctx, tenantNamespace, types.MergePatchType, patch, metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("the tenant labelling its namespace: %v, want forbidden by RBAC", err)
		}
	})
	t.Run("the administrator's namespace label opts out", func(t *testing.T) {
		for _, p := range []*corev1.Pod{allCards(optedOutNamespace, nil), unscheduled(optedOutNamespace, nil)} {
			if _, err := createDry(ctx, cp.Client, p); err != nil {
				t.Errorf("pod %s in %s: %v", p.Name, optedOutNamespace, err)
			}
		}
	})
}
