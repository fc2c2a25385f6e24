package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/test/e2enode/verify"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// nvidiaRuntimeClass is GPU Operator's RuntimeClass (handler nvidia), which
// the e2e program creates as the operator does.
const nvidiaRuntimeClass = "nvidia"

// escapeControls run, on n, the backends' attempts with qGPU's guard
// removed, in controlNamespace (opted out of qGPU's policies, no Pod
// Security level) and without a qGPU resource, so that no agent edit
// applies: one pod that sets every overriding variable (overrides()),
// unprivileged, must keep them; one privileged root pod (the device
// cgroup open to every device) makes the node of every card minor and
// opens it past the cgroup. An attempt of the backends is counted only
// where its control got through. It returns the controls, by key.
//
// Each node's controls are its own pods (named and labelled after the
// node), so that the DRA leg's, beside the device-plugin leg, neither meet
// nor delete another node's; out takes the log lines.
func escapeControls(ctx context.Context, o options, cp *harness.ControlPlane, n *node, out io.Writer) (verify.Controls, result) {
	var res result
	controls := verify.Controls{}
	fail := func(format string, args ...any) {
		res.failures++
		fmt.Fprintf(out, "FAIL "+format+"\n", args...)
	}
	if err := optedOutNamespace(ctx, cp, controlNamespace); err != nil {
		fail("controls on %s: %v", n.name, err)
		return controls, res
	}
	selector := "app.kubernetes.io/part-of=" + backendsLabel + "," + controlNodeLabel + "=" + n.name
	defer func() { _ = deleteAndWaitIn(ctx, cp, controlNamespace, selector) }()
	image := o.repo + "/probe:" + o.version
	env := probePod("control-env-"+n.name, n.name, corev1.Container{Name: "probe", Image: image, ImagePullPolicy: corev1.PullNever, Env: overrides()})
	privileged, root := true, int64(0)
	dev := probePod("control-devices-"+n.name, n.name, corev1.Container{Name: "probe", Image: image, ImagePullPolicy: corev1.PullNever,
		SecurityContext: &corev1.SecurityContext{Privileged: &privileged, RunAsUser: &root}})
	for _, p := range []*corev1.Pod{env, dev} {
		p.Namespace = controlNamespace
		p.Labels[controlNodeLabel] = n.name
		p.Spec.SchedulerName = corev1.DefaultSchedulerName
		res.containers++
		p, lines, err := runProbe(ctx, cp, n, p)
		if err != nil {
			fail("control on %s: %v", n.name, err)
			continue
		}
		var got verify.Controls
		if p.Name == env.Name {
			got = verify.EnvControls(lines, overrides())
		} else {
			got = verify.DeviceControls(lines)
		}
		escaped := 0
		for k, ok := range got {
			controls[k] = ok
			if ok {
				escaped++
			}
		}
		note := ""
		if p.Name == dev.Name {
			note = verify.EscapeSummary(lines)
		}
		fmt.Fprintf(out, "ok   control %s on %s: %d of %d attempts got through without qGPU's guard%s\n", p.Name, n.name, escaped, len(got), note)
	}
	return controls, res
}

// controlNodeLabel names the node a control pod is of.
const controlNodeLabel = "e2e.qgpu.io/control-node"

// nodeEscapes are the attempts that depend on no backend, made once per
// node: a pod that asks for no qGPU resource at all and sets
// NVIDIA_VISIBLE_DEVICES=all (as CUDA images do), scheduled by the
// default scheduler, which must see no card; and the same pod naming
// NVIDIA's RuntimeClass, which the shipped admission policy
// (manifests/admission/nvidia-runtime-class.yaml) must refuse at creation,
// its control the same pod in an opted-out namespace (runtimeControl).
// The cardless pod is listed apart: on a node whose default runtime is
// runc nothing reads the variable, and where NVIDIA's runtime is the
// default, its own setting (accept-nvidia-visible-devices-envvar-when-
// unprivileged=false) ignores it; nothing of qGPU's is what stops it. The
// RuntimeClass pod is counted where its control got every card, listed
// apart where NVIDIA's runtime ignores the variable anyway.
func nodeEscapes(ctx context.Context, o options, cp *harness.ControlPlane, n *node) result {
	var res result
	fail := func(format string, args ...any) {
		res.failures++
		fmt.Printf("FAIL "+format+"\n", args...)
	}
	pod := func(name string) *corev1.Pod {
		c := corev1.Container{Name: "probe", Image: o.repo + "/probe:" + o.version, ImagePullPolicy: corev1.PullNever,
			Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}, {Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "all"}}}
		p := probePod(name, n.name, c)
		p.Spec.SchedulerName = corev1.DefaultSchedulerName
		return p
	}
	const cardlessKey, classKey = "pod without a qGPU resource, NVIDIA_VISIBLE_DEVICES=all", "runtimeClassName nvidia, NVIDIA_VISIBLE_DEVICES=all"
	var attempts []verify.Attempt
	res.containers++
	p, lines, err := runProbe(ctx, cp, n, pod("be-"+n.name+"-cardless"))
	if err != nil {
		fail("a pod without a qGPU resource on %s: %v", n.name, err)
	} else {
		a := verify.Attempt{Key: cardlessKey, Outcome: verify.Apart}
		switch seen := verify.CardsSeen(lines); {
		case len(seen) > 0:
			a.Outcome, a.Detail = verify.Escaped, "sees "+strings.Join(seen, ", ")
		case n.mode.nvidiaDefault && !n.mode.acceptEnvvar:
			a.Detail = "NVIDIA's runtime ignores NVIDIA_VISIBLE_DEVICES of unprivileged containers (its own setting)"
		case n.mode.nvidiaDefault:
			a.Outcome, a.Detail = verify.Refused, "no card" // no control: fails as uncontrolled
		default:
			a.Detail = "runc, the node's default runtime, reads no NVIDIA_VISIBLE_DEVICES"
		}
		attempts = append(attempts, a)
		fmt.Printf("ok   %s on %s: NVIDIA_VISIBLE_DEVICES=all without a qGPU resource: %s\n", p.Name, n.name, cardsNote(lines))
	}
	if err := deleteAndWait(ctx, cp, "app.kubernetes.io/part-of="+backendsLabel); err != nil {
		fail("deleting %s's cardless pod: %v", n.name, err)
	}

	classed := pod("be-" + n.name + "-runtime-class")
	class := nvidiaRuntimeClass
	classed.Spec.RuntimeClassName = &class
	a := verify.Attempt{Key: classKey, Outcome: verify.Refused}
	switch _, err := cp.Client.CoreV1().Pods(examplesNamespace).Create(ctx, classed, metav1.CreateOptions{}); {
	case err != nil && strings.Contains(err.Error(), "qgpu-nvidia-runtime-class"):
		a.Detail = "refused at creation by qgpu-nvidia-runtime-class"
		fmt.Printf("ok   %s refused at creation: %v\n", classed.Name, err)
	case err != nil:
		fail("%s: refused, but not by qgpu-nvidia-runtime-class: %v", classed.Name, err)
		a.Outcome, a.Detail = verify.NotAttempted, err.Error()
	default:
		a.Outcome, a.Detail = verify.Escaped, "the apiserver created it"
		_ = deleteAndWait(ctx, cp, "app.kubernetes.io/part-of="+backendsLabel)
	}
	if a.Outcome == verify.Refused && !n.mode.acceptEnvvar {
		a.Outcome, a.Detail = verify.Apart, "NVIDIA's runtime ignores NVIDIA_VISIBLE_DEVICES of unprivileged containers (its own setting; the control saw no card)"
	}
	attempts = append(attempts, a)
	seen, failures := runtimeControl(ctx, o, cp, n, cardCount(o.fakeCards))
	res.containers++
	res.failures += failures
	controls := verify.Controls{classKey: seen > 0}
	res.failures += escapeLine(n.name, "(node)", verify.Tally(attempts, controls), 0)
	return res
}

// cardsNote says which card nodes a container sees.
func cardsNote(lines []verify.Line) string {
	if seen := verify.CardsSeen(lines); len(seen) > 0 {
		return "sees " + strings.Join(seen, ", ")
	}
	return "no card"
}

// controlNamespace holds the control pod: the e2e program, as the
// cluster's administrator, labels it qgpu.io/admission=ignore, the
// namespace opt-out of qGPU's pod policies (a pod's own label opts out of
// nothing: docs/install.md#admission).
const controlNamespace = "qgpu-e2e-control"

// runtimeControl shows what the admission policy stands between: a pod in
// an opted-out namespace (controlNamespace) that runs under RuntimeClass
// nvidia with NVIDIA_VISIBLE_DEVICES=all. Where the node's
// toolkit accepts the variable from unprivileged containers (GPU
// Operator's default) NVIDIA's runtime gives it every card of the node
// (management.nvidia.com/gpu=all); where it does not, none. Either way
// the pod ran under NVIDIA's runtime, or the escape checks above would
// prove nothing about it. It returns the cards the pod saw and the
// failures it printed.
func runtimeControl(ctx context.Context, o options, cp *harness.ControlPlane, n *node, cards int) (int, int) {
	c := corev1.Container{Name: "probe", Image: o.repo + "/probe:" + o.version, ImagePullPolicy: corev1.PullNever,
		Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}}
	if err := optedOutNamespace(ctx, cp, controlNamespace); err != nil {
		fmt.Printf("FAIL control on %s: %v\n", n.name, err)
		return 0, 1
	}
	p := probePod("control-runtime-class", n.name, c)
	p.Namespace = controlNamespace
	p.Spec.SchedulerName = corev1.DefaultSchedulerName
	class := nvidiaRuntimeClass
	p.Spec.RuntimeClassName = &class
	defer func() { _ = deleteAndWaitIn(ctx, cp, controlNamespace, "app.kubernetes.io/part-of="+backendsLabel) }()
	_, lines, err := runProbe(ctx, cp, n, p)
	if err != nil {
		fmt.Printf("FAIL control on %s: a pod under RuntimeClass nvidia: %v\n", n.name, err)
		return 0, 1
	}
	seen := 0
	for _, l := range lines {
		if l.Kind == "dev" && strings.HasPrefix(l.Name, "nvidia") && l.Name != "nvidiactl" && l.Char {
			seen++
		}
	}
	want := 0
	if n.mode.acceptEnvvar {
		want = cards
	}
	if seen != want {
		fmt.Printf("FAIL control on %s (%s): a pod under RuntimeClass nvidia with NVIDIA_VISIBLE_DEVICES=all sees %d cards, want %d\n", n.name, n.mode, seen, want)
		return seen, 1
	}
	fmt.Printf("ok   control on %s (%s): a pod of an opted-out namespace under RuntimeClass nvidia with NVIDIA_VISIBLE_DEVICES=all sees %d of %d cards\n", n.name, n.mode, seen, cards)
	return seen, 0
}

// runProbe creates the probe pod p in its namespace, waits until it runs
// and returns it with its output.
func runProbe(ctx context.Context, cp *harness.ControlPlane, n *node, p *corev1.Pod) (*corev1.Pod, []verify.Line, error) {
	p, err := cp.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return nil, nil, err
	}
	if p, err = waitPodSettledIn(ctx, cp, p.Namespace, p.Name); err != nil {
		return p, nil, err
	}
	lines, err := containerOutput(n.dir, p, "probe")
	return p, lines, err
}
