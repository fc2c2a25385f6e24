package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/qgpu-scheduler/qgpu/test/e2enode/verify"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// The tenant suite (docs/real-node.md#the-tenant-suite): what someone who
// may create pods and ResourceClaims in their own namespace, and nothing
// else, tries to get past their slice. The namespace enforces Pod
// Security baseline and carries no admin label; requests are made as the
// user tenantUser (impersonated), whom a Role allows pods and claims
// there. Each attempt is counted only against a control in the same run:
// the same attempt with qGPU's guard removed (the namespace an
// administrator opted out, the per-card directory of another card, the
// claim released, an administrator's identity) that got through. Its line:
//
//	tenant attempts N refused N, controls N escaped N
const (
	tenantNamespace = "qgpu-e2e-tenant"
	tenantUser      = "e2e-tenant"
	tenantLabel     = "qgpu-e2e-tenant"
	// minTenantAttempts is the fewest counted attempts the line may hold.
	minTenantAttempts = 8
)

// tenantSuite holds the suite's clients and its attempts and controls.
type tenantSuite struct {
	ctx      context.Context
	o        options
	cp       *harness.ControlPlane
	tenant   kubernetes.Interface
	res      result
	attempts []verify.Attempt
	controls verify.Controls
}

func (t *tenantSuite) fail(format string, args ...any) {
	t.res.failures++
	fmt.Printf("FAIL tenant: "+format+"\n", args...)
}

// refused records an attempt refused by what, and prints it.
func (t *tenantSuite) refused(key, what string) {
	t.attempts = append(t.attempts, verify.Attempt{Key: key, Outcome: verify.Refused, Detail: what})
	fmt.Printf("ok   tenant %s: refused by %s\n", key, what)
}

// escaped records an attempt that got through.
func (t *tenantSuite) escaped(key, what string) {
	t.attempts = append(t.attempts, verify.Attempt{Key: key, Outcome: verify.Escaped, Detail: what})
}

// notAttempted records an attempt that could not be made.
func (t *tenantSuite) notAttempted(key, why string) {
	t.attempts = append(t.attempts, verify.Attempt{Key: key, Outcome: verify.NotAttempted, Detail: why})
}

// apart records an attempt something other than qGPU refuses.
func (t *tenantSuite) apart(key, why string) {
	t.attempts = append(t.attempts, verify.Attempt{Key: key, Outcome: verify.Apart, Detail: why})
	fmt.Printf("     tenant %s: not counted: %s\n", key, why)
}

// control records the attempt's control and prints it.
func (t *tenantSuite) control(key string, escaped bool, what string) {
	t.controls[key] = escaped
	verdict := "got through"
	if !escaped {
		verdict = "was refused too"
	}
	fmt.Printf("     tenant %s: control %s %s\n", key, verdict, what)
}

// tenantChecks runs the suite: runtime and device requests on the
// device-plugin nodes (plain: runc default; nvidiaDefault: NVIDIA's runtime
// default, which passes cdi.k8s.io/ pod annotations to it), the MPS
// directories on nvidiaDefault relabelled mps, a claim joined by a
// nodeName pod on the DRA node (after the DRA leg), and the agent's token.
func tenantChecks(ctx context.Context, start time.Time, o options, cp *harness.ControlPlane, nodes []*node, draN *node) result {
	t := &tenantSuite{ctx: ctx, o: o, cp: cp, controls: verify.Controls{}}
	var plain, nvidiaDefault *node
	for _, n := range nodes {
		if n.mode.nvidiaDefault {
			nvidiaDefault = n
		} else {
			plain = n
		}
	}
	if plain == nil || nvidiaDefault == nil {
		t.fail("needs a runc-default and an NVIDIA-default node")
		return t.res
	}
	if err := t.setUp(); err != nil {
		t.fail("setting up %s: %v", tenantNamespace, err)
		return t.res
	}
	if err := optedOutNamespace(ctx, cp, controlNamespace); err != nil {
		t.fail("%v", err)
		return t.res
	}
	// The examples of the last pass hold cards (online and offline pods
	// keep theirs from general ones): the suite needs a T4 and a V100.
	if err := deleteAndWait(ctx, cp, "app.kubernetes.io/part-of=qgpu-examples"); err != nil {
		t.fail("deleting the examples: %v", err)
	}
	stepLog(start, "tenant suite: namespace %s (Pod Security baseline, no admin label), user %s", tenantNamespace, tenantUser)
	t.runtimeClassOptOut(plain)
	t.deviceRequests(nvidiaDefault)
	stepLog(start, "tenant suite: runtime and device requests done")
	t.agentToken(plain, nvidiaDefault)
	stepLog(start, "tenant suite: the agent's token done")
	if draN != nil {
		t.claimJoin(draN)
	} else {
		t.notAttempted("a nodeName pod joins another pod's claim", "no DRA node")
	}
	stepLog(start, "tenant suite: claim join done")
	t.mpsDirectories(nvidiaDefault)
	stepLog(start, "tenant suite: MPS directories done")
	_ = deleteAndWaitIn(ctx, cp, tenantNamespace, "app.kubernetes.io/part-of="+tenantLabel)
	_ = deleteAndWaitIn(ctx, cp, controlNamespace, "app.kubernetes.io/part-of="+tenantLabel)
	c := verify.Tally(t.attempts, t.controls)
	fmt.Printf("tenant attempts %d refused %d, controls %d escaped %d\n", c.Attempts, c.Refused, c.Controls, c.Escaped)
	if note := c.ApartNote(); note != "" {
		fmt.Printf("     tenant: not counted: %s\n", note)
	}
	if c.Failed(minTenantAttempts) {
		for _, p := range c.Problems {
			fmt.Printf("FAIL tenant %s\n", p)
		}
		fmt.Printf("FAIL tenant attempts %d refused %d, controls %d escaped %d (want at least %d, all refused, each with a control that escaped)\n",
			c.Attempts, c.Refused, c.Controls, c.Escaped, minTenantAttempts)
		t.res.failures++
	}
	return t.res
}

// setUp makes the tenant's namespace (Pod Security baseline enforced, no
// qgpu.io/admission label), a Role for pods and claims bound to
// tenantUser, and the client that impersonates that user.
func (t *tenantSuite) setUp() error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNamespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "latest"}}}
	if _, err := t.cp.Client.CoreV1().Namespaces().Create(t.ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: tenantNamespace}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "pods/log"}, Verbs: []string{"*"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims", "resourceclaimtemplates"}, Verbs: []string{"*"}},
	}}
	if _, err := t.cp.Client.RbacV1().Roles(tenantNamespace).Create(t.ctx, role, metav1.CreateOptions{}); err != nil {
		return err
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: tenantNamespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: tenantUser}}}
	if _, err := t.cp.Client.RbacV1().RoleBindings(tenantNamespace).Create(t.ctx, rb, metav1.CreateOptions{}); err != nil {
		return err
	}
	cfg := rest.CopyConfig(t.cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: tenantUser, Groups: []string{"system:authenticated"}}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	t.tenant = client
	return wait.PollUntilContextTimeout(t.ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := t.cp.Client.CoreV1().ServiceAccounts(tenantNamespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// pod is a probe pod of the suite on node, scheduled by the default
// scheduler, in namespace ns.
func (t *tenantSuite) pod(ns, name string, n *node, env ...corev1.EnvVar) *corev1.Pod {
	p := probePod(name, n.name, corev1.Container{Name: "probe", Image: t.o.repo + "/probe:" + t.o.version,
		ImagePullPolicy: corev1.PullNever, Env: env})
	p.Namespace = ns
	p.Labels = map[string]string{"app.kubernetes.io/part-of": tenantLabel}
	p.Spec.SchedulerName = corev1.DefaultSchedulerName
	return p
}

// createRefused has the tenant create p and records the attempt key as
// refused when the apiserver answered with policy's name in its error.
func (t *tenantSuite) createRefused(key, policy string, p *corev1.Pod) {
	_, err := t.tenant.CoreV1().Pods(p.Namespace).Create(t.ctx, p, metav1.CreateOptions{})
	switch {
	case err != nil && strings.Contains(err.Error(), policy):
		t.refused(key, policy+" at creation")
	case err != nil:
		t.notAttempted(key, "refused, but not by "+policy+": "+err.Error())
	default:
		t.escaped(key, "the apiserver created it")
		_ = deleteAndWaitIn(t.ctx, t.cp, p.Namespace, "app.kubernetes.io/part-of="+tenantLabel)
	}
}

// controlPod runs p (made by the administrator, in controlNamespace) and
// returns the card nodes it sees.
func (t *tenantSuite) controlPod(n *node, p *corev1.Pod) ([]string, []verify.Line, error) {
	p.Namespace = controlNamespace
	defer func() { _ = deleteAndWaitIn(t.ctx, t.cp, controlNamespace, "app.kubernetes.io/part-of="+tenantLabel) }()
	t.res.containers++
	_, lines, err := runProbe(t.ctx, t.cp, n, p)
	if err != nil {
		return nil, nil, err
	}
	return verify.CardsSeen(lines), lines, nil
}

// cardControl records a control that got through when it saw a card.
func (t *tenantSuite) cardControl(key string, n *node, p *corev1.Pod, what string) {
	seen, _, err := t.controlPod(n, p)
	if err != nil {
		t.fail("%s: control: %v", key, err)
		return
	}
	t.control(key, len(seen) > 0, fmt.Sprintf("(%s on %s): sees %d card nodes %v", what, n.name, len(seen), seen))
}

// runtimeClassOptOut: a pod labelled qgpu.io/admission=ignore under
// RuntimeClass nvidia with NVIDIA_VISIBLE_DEVICES=all on n (whose NVIDIA
// runtime accepts the variable): the pod's own label opts out of nothing.
// Control: the same pod in the namespace an administrator opted out.
func (t *tenantSuite) runtimeClassOptOut(n *node) {
	const key = "pod label qgpu.io/admission=ignore with runtimeClassName nvidia"
	mk := func(ns string) *corev1.Pod {
		p := t.pod(ns, "tenant-runtime-class", n, corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"})
		p.Labels["qgpu.io/admission"] = "ignore"
		class := nvidiaRuntimeClass
		p.Spec.RuntimeClassName = &class
		return p
	}
	t.createRefused(key, "qgpu-nvidia-runtime-class", mk(tenantNamespace))
	t.cardControl(key, n, mk(controlNamespace), "the same pod in the admin-labelled namespace "+controlNamespace)
}

// deviceRequests: device requests a pod makes of the runtime itself, on n
// (NVIDIA's runtime as default): a CDI annotation, refused by
// qgpu-device-requests (control: the same pod in the opted-out namespace,
// where containerd passes the annotation to NVIDIA's runtime, which
// injects every card); and mounts under /var/run/nvidia-container-devices,
// listed apart: NVIDIA's runtime reads only mounts of /dev/null (a
// hostPath, which Pod Security baseline refuses before any qGPU policy),
// and an emptyDir there is refused by qgpu-device-requests but would get
// nothing.
func (t *tenantSuite) deviceRequests(n *node) {
	const annKey = "CDI annotation cdi.k8s.io/ naming every card"
	mk := func(ns string) *corev1.Pod {
		p := t.pod(ns, "tenant-cdi-annotation", n)
		p.Annotations = map[string]string{"cdi.k8s.io/e2e-tenant": "management.nvidia.com/gpu=all"}
		return p
	}
	t.createRefused(annKey, "qgpu-device-requests", mk(tenantNamespace))
	t.cardControl(annKey, n, mk(controlNamespace), "the same pod in "+controlNamespace)

	mount := func(name string, v corev1.VolumeSource) *corev1.Pod {
		p := t.pod(tenantNamespace, name, n)
		p.Spec.Volumes = []corev1.Volume{{Name: "devices", VolumeSource: v}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "devices", MountPath: "/var/run/nvidia-container-devices/all"}}
		return p
	}
	hostPath := mount("tenant-mount-hostpath", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/null"}})
	const hostKey = "volume mount of /dev/null at /var/run/nvidia-container-devices/all"
	switch _, err := t.tenant.CoreV1().Pods(tenantNamespace).Create(t.ctx, hostPath, metav1.CreateOptions{}); {
	case err != nil && strings.Contains(err.Error(), "PodSecurity"):
		t.apart(hostKey, "Pod Security baseline refuses the hostPath before qgpu-device-requests")
	case err != nil:
		t.notAttempted(hostKey, err.Error())
	default:
		t.escaped(hostKey, "created in a baseline namespace")
	}
	empty := mount("tenant-mount-emptydir", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}})
	const emptyKey = "emptyDir at /var/run/nvidia-container-devices/all"
	switch _, err := t.tenant.CoreV1().Pods(tenantNamespace).Create(t.ctx, empty, metav1.CreateOptions{}); {
	case err != nil && strings.Contains(err.Error(), "qgpu-device-requests"):
		t.apart(emptyKey, "refused by qgpu-device-requests, but NVIDIA's runtime reads only mounts of /dev/null: it would get nothing")
	case err != nil:
		t.notAttempted(emptyKey, err.Error())
	default:
		t.escaped(emptyKey, "created")
	}
	_ = deleteAndWaitIn(t.ctx, t.cp, tenantNamespace, "app.kubernetes.io/part-of="+tenantLabel)
}
