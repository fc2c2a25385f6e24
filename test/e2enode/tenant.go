package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
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

// mpsDirectories, on n labelled mps: a tenant's MPS client (root, as
// baseline allows) writes into the pipe directory, read-only (control: the
// same write with the card's pipe directory mounted read-write); a client
// on another card reads the first one's /dev/shm segment, absent there
// (per-card shm; control: the same read with the first card's shm
// directory mounted).
func (t *tenantSuite) mpsDirectories(n *node) {
	const pipeKey, shmKey = "write into the MPS pipe directory", "read another card's /dev/shm segment"
	if err := labelNode(t.ctx, t.cp, n.name, map[string]string{protocol.LabelEnforcement: "mps",
		protocol.LabelSchedulePolicy: string(protocol.PolicyFixedShare)}); err != nil {
		t.fail("labelling %s mps: %v", n.name, err)
		return
	}
	if err := waitMPSDaemon(t.ctx, t.cp, n); err != nil {
		t.fail("%v", err)
	}
	client := func(name, gpuType string, env ...corev1.EnvVar) (*corev1.Pod, []verify.Line, error) {
		var last error
		for attempt := 1; attempt <= 3; attempt++ {
			p := t.pod(tenantNamespace, fmt.Sprintf("%s-%d", name, attempt), n, env...)
			p.Spec.SchedulerName = protocol.SchedulerName
			p.Annotations = map[string]string{protocol.AnnotationUseGPUType: gpuType}
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
				protocol.ResourceMemory: resource.MustParse("2"), protocol.ResourceCore: resource.MustParse("20")}
			t.res.containers++
			p, err := t.tenant.CoreV1().Pods(tenantNamespace).Create(t.ctx, p, metav1.CreateOptions{})
			if err != nil {
				return nil, nil, err
			}
			if p, err = waitPodSettledIn(t.ctx, t.cp, tenantNamespace, p.Name); err == nil {
				lines, err := containerOutput(n.dir, p, "probe")
				if err == nil && verify.Backend(lines) == "mps" {
					return p, lines, nil
				}
				last = fmt.Errorf("%s: backend %q: %v", p.Name, verify.Backend(lines), err)
			} else {
				last = fmt.Errorf("%s: %w", p.Name, err)
			}
			fmt.Println("  retrying:", last)
			_ = t.cp.Client.CoreV1().Pods(tenantNamespace).Delete(t.ctx, p.Name, metav1.DeleteOptions{})
		}
		return nil, nil, last
	}
	const segment = "qgpu-e2e-tenant-segment"
	x, xLines, err := client("tenant-mps-t4", "t4", corev1.EnvVar{Name: "PROBE_MPS_PIPE_WRITE", Value: "1"},
		corev1.EnvVar{Name: "PROBE_SHM_WRITE", Value: segment})
	if err != nil {
		t.fail("an MPS client on %s: %v", n.name, err)
		t.notAttempted(pipeKey, err.Error())
		t.notAttempted(shmKey, err.Error())
		return
	}
	uuid := firstUUID(x)
	switch v := attemptLine(xLines, "mps-pipe-write"); {
	case strings.HasPrefix(v, "refused:"):
		t.refused(pipeKey, "the read-only bind of the card's pipe directory ("+v+")")
	case v == "":
		t.notAttempted(pipeKey, "the probe printed no mps-pipe-write line")
	default:
		t.escaped(pipeKey, v)
	}
	hostDir := func(sub string) corev1.VolumeSource {
		return corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/qgpu/mps/" + uuid + "/" + sub}}
	}
	ctl := t.pod(controlNamespace, "tenant-control-pipe", n, corev1.EnvVar{Name: "PROBE_MPS_PIPE_WRITE", Value: "1"})
	ctl.Spec.Volumes = []corev1.Volume{{Name: "pipe", VolumeSource: hostDir("pipe")}}
	ctl.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "pipe", MountPath: "/tmp/nvidia-mps"}}
	if _, lines, err := t.controlPod(n, ctl); err != nil {
		t.fail("%s: control: %v", pipeKey, err)
	} else {
		v := attemptLine(lines, "mps-pipe-write")
		t.control(pipeKey, strings.HasPrefix(v, "written"), "(the card's pipe directory mounted read-write): "+v)
	}

	if !hasLine(xLines, "shm-written", segment) {
		t.fail("%s: %s wrote no segment /dev/shm/%s", shmKey, x.Name, segment)
		t.notAttempted(shmKey, "no segment written")
		return
	}
	y, yLines, err := client("tenant-mps-v100", "v100", corev1.EnvVar{Name: "PROBE_SHM_READ", Value: segment})
	if err != nil {
		t.fail("a second MPS client on %s: %v", n.name, err)
		t.notAttempted(shmKey, err.Error())
		return
	}
	if other := firstUUID(y); other == uuid {
		t.notAttempted(shmKey, "both clients on card "+uuid)
	} else {
		switch v := attemptLine(yLines, "shm-read"); {
		case strings.HasPrefix(v, "absent:"):
			t.refused(shmKey, "the per-card /dev/shm (card "+other+"'s, not "+uuid+"'s): "+v)
		case v == "":
			t.notAttempted(shmKey, "the probe printed no shm-read line")
		default:
			t.escaped(shmKey, v)
		}
	}
	ctl = t.pod(controlNamespace, "tenant-control-shm", n, corev1.EnvVar{Name: "PROBE_SHM_READ", Value: segment})
	ctl.Spec.Volumes = []corev1.Volume{{Name: "shm", VolumeSource: hostDir("shm")}}
	ctl.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "shm", MountPath: "/dev/shm"}}
	if _, lines, err := t.controlPod(n, ctl); err != nil {
		t.fail("%s: control: %v", shmKey, err)
	} else {
		v := attemptLine(lines, "shm-read")
		t.control(shmKey, strings.HasPrefix(v, "read:"), "(the first card's shm directory, as one shm for the node would be): "+v)
	}
	_ = deleteAndWaitIn(t.ctx, t.cp, tenantNamespace, "app.kubernetes.io/part-of="+tenantLabel)
}

// firstUUID is the card of the pod's first slice ("" without one).
func firstUUID(p *corev1.Pod) string {
	a, err := protocol.DecodeAssignment([]byte(p.Annotations[protocol.AnnotationAssignment]))
	if err != nil || len(a.Containers) == 0 || len(a.Containers[0].Slices) == 0 {
		return ""
	}
	return a.Containers[0].Slices[0].UUID
}

// attemptLine is the value of the probe's attempt line name ("" without).
func attemptLine(lines []verify.Line, name string) string {
	for _, l := range lines {
		if l.Kind == "attempt" && l.Name == name {
			return l.Value
		}
	}
	return ""
}

func hasLine(lines []verify.Line, kind, name string) bool {
	for _, l := range lines {
		if l.Kind == kind && l.Name == name {
			return true
		}
	}
	return false
}

// claimJoin, on the DRA node n: the tenant's pod A holds a claim of a
// whole T4's memory; pod B, with spec.nodeName set, joins A's allocated
// claim; A is deleted. The claim's slice must stay counted: of two new
// pods asking for a card's memory each, one runs on the other card and
// the second stays Pending. Control: B deleted and the claim deleted, the
// second pod is placed on the card the claim held.
func (t *tenantSuite) claimJoin(n *node) {
	const key = "a nodeName pod joins another pod's claim, the first deleted"
	claims := t.tenant.ResourceV1().ResourceClaims(tenantNamespace)
	spec := claimTemplate("tenant-card", protocol.ClassGeneral, "14Gi", "10")
	spec.Namespace = tenantNamespace
	if _, err := t.tenant.ResourceV1().ResourceClaimTemplates(tenantNamespace).Create(t.ctx, spec, metav1.CreateOptions{}); err != nil {
		t.fail("%s: template: %v", key, err)
		t.notAttempted(key, err.Error())
		return
	}
	shared := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "tenant-shared", Namespace: tenantNamespace}, Spec: spec.Spec.Spec}
	if _, err := claims.Create(t.ctx, shared, metav1.CreateOptions{}); err != nil {
		t.fail("%s: claim: %v", key, err)
		t.notAttempted(key, err.Error())
		return
	}
	claimPod := func(name string, claim *string, template *string) *corev1.Pod {
		p := t.pod(tenantNamespace, name, n)
		p.Spec.NodeSelector = nil
		p.Annotations = map[string]string{protocol.AnnotationUseGPUType: "t4"}
		p.Spec.SchedulerName = protocol.SchedulerName
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: claim, ResourceClaimTemplateName: template}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		return p
	}
	run := func(p *corev1.Pod) (*corev1.Pod, error) {
		t.res.containers++
		if _, err := t.tenant.CoreV1().Pods(tenantNamespace).Create(t.ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		return waitPodSettledIn(t.ctx, t.cp, tenantNamespace, p.Name)
	}
	name := shared.Name
	if _, err := run(claimPod("tenant-claim-a", &name, nil)); err != nil {
		t.fail("%s: pod A: %v", key, err)
		t.notAttempted(key, err.Error())
		return
	}
	b := claimPod("tenant-claim-b", &name, nil)
	b.Spec.SchedulerName = corev1.DefaultSchedulerName
	b.Spec.NodeName = n.name
	if _, err := run(b); err != nil {
		t.fail("%s: pod B (nodeName): %v", key, err)
		t.notAttempted(key, err.Error())
		return
	}
	claim, err := claims.Get(t.ctx, name, metav1.GetOptions{})
	if err != nil || claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) == 0 {
		t.fail("%s: the shared claim is not allocated: %v", key, err)
		t.notAttempted(key, "claim not allocated")
		return
	}
	heldCard := claim.Status.Allocation.Devices.Results[0].Device
	if err := t.tenant.CoreV1().Pods(tenantNamespace).Delete(t.ctx, "tenant-claim-a", metav1.DeleteOptions{}); err != nil {
		t.fail("%s: deleting A: %v", key, err)
	}
	if err := waitGone(t.ctx, t.cp, tenantNamespace, "tenant-claim-a"); err != nil {
		t.fail("%s: A not gone: %v", key, err)
	}
	fmt.Printf("     tenant %s: pods A and B held claim %s (device %s); A deleted, B still holds it\n", key, name, heldCard)
	tmpl := "tenant-card"
	for _, c := range []string{"tenant-claim-c1", "tenant-claim-c2"} {
		t.res.containers++
		if _, err := t.tenant.CoreV1().Pods(tenantNamespace).Create(t.ctx, claimPod(c, nil, &tmpl), metav1.CreateOptions{}); err != nil {
			t.fail("%s: %s: %v", key, c, err)
			t.notAttempted(key, err.Error())
			return
		}
	}
	// One of the two runs (the other card); the other must stay Pending:
	// bounded wait for one running and a FailedScheduling of the other.
	var running, pending string
	err = wait.PollUntilContextTimeout(t.ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		running, pending = "", ""
		for _, c := range []string{"tenant-claim-c1", "tenant-claim-c2"} {
			p, err := t.cp.Client.CoreV1().Pods(tenantNamespace).Get(ctx, c, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			switch {
			case p.Status.Phase == corev1.PodRunning:
				running = c
			case p.Spec.NodeName == "" && failedScheduling(ctx, t.cp, c):
				pending = c
			}
		}
		return running != "" && pending != "", nil
	})
	if err != nil {
		t.escaped(key, fmt.Sprintf("after 2m running %q pending %q: want one of each", running, pending))
		return
	}
	// Hold a few seconds more: the pending pod must not be placed.
	time.Sleep(5 * time.Second)
	if p, err := t.cp.Client.CoreV1().Pods(tenantNamespace).Get(t.ctx, pending, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.escaped(key, pending+" was placed on the claim's memory")
		return
	}
	t.refused(key, fmt.Sprintf("the ledger counting the claim by claim: %s runs on the other card, %s stays Pending", running, pending))
	// Control: release the claim (B deleted, the claim deleted); the
	// pending pod made again is placed on the card the claim held. (The
	// pending pod itself is placed as soon as the claim is deallocated:
	// the ledger's claim handler wakes the waiting pods, and in the run of
	// 2026-11-28 11:50 the scheduler bound it 3 s after B went, before this
	// deleted it. Making it again keeps the control independent of that.)
	_ = t.tenant.CoreV1().Pods(tenantNamespace).Delete(t.ctx, "tenant-claim-b", metav1.DeleteOptions{})
	_ = waitGone(t.ctx, t.cp, tenantNamespace, "tenant-claim-b")
	_ = claims.Delete(t.ctx, name, metav1.DeleteOptions{})
	_ = t.tenant.CoreV1().Pods(tenantNamespace).Delete(t.ctx, pending, metav1.DeleteOptions{})
	_ = waitGone(t.ctx, t.cp, tenantNamespace, pending)
	err = wait.PollUntilContextTimeout(t.ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := t.cp.Client.ResourceV1().ResourceClaims(tenantNamespace).Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.control(key, false, "(the claim released): claim "+name+" still there: "+err.Error())
		return
	}
	again := pending + "-again"
	p, err := run(claimPod(again, nil, &tmpl))
	if err != nil {
		t.control(key, false, "(B and the claim deleted): "+again+" not running: "+err.Error())
		return
	}
	device := ""
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			if c, err := claims.Get(t.ctx, *st.ResourceClaimName, metav1.GetOptions{}); err == nil && c.Status.Allocation != nil && len(c.Status.Allocation.Devices.Results) > 0 {
				device = c.Status.Allocation.Devices.Results[0].Device
			}
		}
	}
	t.control(key, device == heldCard, fmt.Sprintf("(B and the claim deleted): %s, made again, runs on %s, device %s (the claim held %s)", again, p.Spec.NodeName, device, heldCard))
	_ = deleteAndWaitIn(t.ctx, t.cp, tenantNamespace, "app.kubernetes.io/part-of="+tenantLabel)
}

// failedScheduling reports whether the pod has a FailedScheduling event
// that is not about its claim not being created yet.
func failedScheduling(ctx context.Context, cp *harness.ControlPlane, pod string) bool {
	list, err := cp.Client.CoreV1().Events(tenantNamespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod + ",reason=FailedScheduling"})
	if err != nil {
		return false
	}
	for _, e := range list.Items {
		if !strings.Contains(e.Message, "is not created yet") {
			return true
		}
	}
	return false
}

// waitGone waits (bounded) until the pod no longer exists.
func waitGone(ctx context.Context, cp *harness.ControlPlane, ns, name string) error {
	return wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
}

// agentToken: the agent's ServiceAccount token of own's agent pod (bound
// to that pod, so it names own's node) writes what the agent never does:
// a label on another Node, a node-restriction label and a taint on its
// own Node, the image of a pod on its node, a label of a pod on another
// node. Each must be refused by qgpu-agent-own-node; control: the same
// write by the administrator succeeds (then is undone), so the write is
// valid and RBAC is not what refused it.
func (t *tenantSuite) agentToken(own, other *node) {
	agent, err := t.agentClient(own)
	if err != nil {
		t.fail("the agent's token on %s: %v", own.name, err)
		t.notAttempted("agent token", err.Error())
		return
	}
	// Pods to write: one on the agent's node, one on the other node.
	mine := t.pod(tenantNamespace, "tenant-agent-target", own)
	theirs := t.pod(tenantNamespace, "tenant-agent-foreign", other)
	for _, p := range []*corev1.Pod{mine, theirs} {
		t.res.containers++
		if _, err := t.tenant.CoreV1().Pods(tenantNamespace).Create(t.ctx, p, metav1.CreateOptions{}); err != nil {
			t.fail("agent token: creating %s: %v", p.Name, err)
			return
		}
		if _, err := waitPodSettledIn(t.ctx, t.cp, tenantNamespace, p.Name); err != nil {
			t.fail("agent token: %s: %v", p.Name, err)
			return
		}
	}
	type write struct {
		key, kind, name, patch, undo, want string
	}
	image := t.o.repo + "/pause:" + t.o.version
	writes := []write{
		{"agent token: a label on another Node", "node", other.name,
			`{"metadata":{"labels":{"e2e.qgpu.io/forged":"true"}}}`, `{"metadata":{"labels":{"e2e.qgpu.io/forged":null}}}`,
			"may not write Node " + other.name},
		{"agent token: a node-restriction label on its own Node", "node", own.name,
			`{"metadata":{"labels":{"node-restriction.kubernetes.io/e2e-forged":"true"}}}`,
			`{"metadata":{"labels":{"node-restriction.kubernetes.io/e2e-forged":null}}}`, "may not change metadata.labels"},
		{"agent token: a taint other than xgn on its own Node", "node-taint", own.name, "", "", "may not change spec.taints"},
		{"agent token: the image of a pod on its node", "pod", mine.Name,
			`{"spec":{"containers":[{"name":"probe","image":"` + image + `"}]}}`, "", "may not change spec.containers"},
		{"agent token: a label of a pod on another node", "pod", theirs.Name,
			`{"metadata":{"labels":{"e2e.qgpu.io/forged":"true"}}}`, `{"metadata":{"labels":{"e2e.qgpu.io/forged":null}}}`,
			"may write only pods bound to it"},
	}
	patch := func(c kubernetes.Interface, w write, body string) error {
		switch w.kind {
		case "node":
			_, err := c.CoreV1().Nodes().Patch(t.ctx, w.name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
			return err
		case "pod":
			_, err := c.CoreV1().Pods(tenantNamespace).Patch(t.ctx, w.name, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{})
			return err
		}
		return fmt.Errorf("unknown kind %s", w.kind)
	}
	for _, w := range writes {
		if w.kind == "node-taint" {
			t.taintWrite(agent, w.key, w.name, w.want)
			continue
		}
		switch err := patch(agent, w, w.patch); {
		case err != nil && strings.Contains(err.Error(), "qgpu-agent-own-node") && strings.Contains(err.Error(), w.want):
			t.refused(w.key, "qgpu-agent-own-node ("+w.want+")")
		case err != nil:
			t.notAttempted(w.key, "refused, but not as qgpu-agent-own-node refuses it: "+err.Error())
		default:
			t.escaped(w.key, "the apiserver accepted the agent's write")
		}
		err := patch(t.cp.Client, w, w.patch)
		t.control(w.key, err == nil, fmt.Sprintf("(the same write by the administrator): error %v", err))
		if err == nil && w.undo != "" {
			if err := patch(t.cp.Client, w, w.undo); err != nil {
				t.fail("%s: undoing the control's write: %v", w.key, err)
			}
		}
	}
}

// taintWrite: the agent's token adds a taint other than its xgn taint to
// its own Node; control: the administrator adds the same taint (and
// removes it).
func (t *tenantSuite) taintWrite(agent kubernetes.Interface, key, node, want string) {
	taint := corev1.Taint{Key: "e2e.qgpu.io/forged", Value: "true", Effect: corev1.TaintEffectPreferNoSchedule}
	// The agent's role may patch Nodes, not update them: a merge patch of
	// the whole taint list.
	setTaints := func(c kubernetes.Interface, keepForged bool) error {
		n, err := t.cp.Client.CoreV1().Nodes().Get(t.ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var taints []corev1.Taint
		for _, tt := range n.Spec.Taints {
			if tt.Key != taint.Key {
				taints = append(taints, tt)
			}
		}
		if keepForged {
			taints = append(taints, taint)
		}
		body, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": taints}})
		if err != nil {
			return err
		}
		_, err = c.CoreV1().Nodes().Patch(t.ctx, node, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	}
	add := func(c kubernetes.Interface) error { return setTaints(c, true) }
	switch err := add(agent); {
	case err != nil && strings.Contains(err.Error(), "qgpu-agent-own-node") && strings.Contains(err.Error(), want):
		t.refused(key, "qgpu-agent-own-node ("+want+")")
	case err != nil:
		t.notAttempted(key, "refused, but not as qgpu-agent-own-node refuses it: "+err.Error())
	default:
		t.escaped(key, "the apiserver accepted the agent's write")
	}
	err := add(t.cp.Client)
	t.control(key, err == nil, fmt.Sprintf("(the same write by the administrator): error %v", err))
	if err != nil {
		return
	}
	err = setTaints(t.cp.Client, false)
	if err != nil {
		t.fail("%s: removing the control's taint: %v", key, err)
	}
}

// agentClient is a client with a token of the agent's ServiceAccount
// bound to the agent's pod on n, as the kubelet projects it (so it names
// n as authentication.kubernetes.io/node-name).
func (t *tenantSuite) agentClient(n *node) (kubernetes.Interface, error) {
	pods, err := t.cp.Client.CoreV1().Pods(systemNamespace).List(t.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.name})
	if err != nil {
		return nil, err
	}
	var agent *corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; strings.HasPrefix(p.Labels["app"], "qgpu-agent") && p.Spec.ServiceAccountName == "qgpu-agent" && p.DeletionTimestamp == nil {
			agent = p
		}
	}
	if agent == nil {
		return nil, fmt.Errorf("no agent pod with ServiceAccount qgpu-agent on %s", n.name)
	}
	expiry := int64(600)
	tr, err := t.cp.Client.CoreV1().ServiceAccounts(systemNamespace).CreateToken(t.ctx, "qgpu-agent", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: agent.Name, UID: agent.UID}}},
		metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	cfg := rest.AnonymousClientConfig(t.cp.Config)
	cfg.BearerToken = tr.Status.Token
	return kubernetes.NewForConfig(cfg)
}
