package main

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/test/e2enode/verify"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// nvidiaRuntimeClass is GPU Operator's RuntimeClass (handler nvidia), which
// the e2e program creates as the operator does.
const nvidiaRuntimeClass = "nvidia"

// cardlessEscapes are the attempts of pods that ask for no qGPU resource
// at all and set NVIDIA_VISIBLE_DEVICES=all (as CUDA images do): one
// scheduled by the default scheduler, which must see no card, and one that
// also names NVIDIA's RuntimeClass, which the shipped admission policy
// (manifests/admission/nvidia-runtime-class.yaml) must refuse at creation:
// under that runtime it would get every card. It returns the tally and the
// failures it printed.
func cardlessEscapes(ctx context.Context, o options, cp *harness.ControlPlane, n *node, backend string) (verify.Tally, int) {
	var tally verify.Tally
	failures := 0
	fail := func(format string, args ...any) {
		failures++
		fmt.Printf("FAIL "+format+"\n", args...)
	}
	pod := func(name string) *corev1.Pod {
		c := corev1.Container{Name: "probe", Image: o.repo + "/probe:" + o.version, ImagePullPolicy: corev1.PullNever,
			Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}, {Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "all"}}}
		p := probePod(name, n.name, c)
		p.Spec.SchedulerName = corev1.DefaultSchedulerName
		return p
	}

	p, lines, err := runProbe(ctx, cp, n, pod("be-"+backend+"-cardless"))
	if err != nil {
		fail("%s: a pod without a qGPU resource on %s: %v", backend, n.name, err)
	} else {
		t, problems := verify.NoCards(lines)
		tally.Add(t)
		if len(problems) > 0 {
			fail("%s %s: %s", backend, p.Name, strings.Join(problems, "; "))
		} else {
			fmt.Printf("ok   %s %s on %s: NVIDIA_VISIBLE_DEVICES=all without a qGPU resource, and no card\n", backend, p.Name, n.name)
		}
	}

	classed := pod("be-" + backend + "-runtime-class")
	class := nvidiaRuntimeClass
	classed.Spec.RuntimeClassName = &class
	tally.Attempts++
	switch _, err := cp.Client.CoreV1().Pods(examplesNamespace).Create(ctx, classed, metav1.CreateOptions{}); {
	case err != nil && strings.Contains(err.Error(), "qgpu-nvidia-runtime-class"):
		tally.Refused++
		fmt.Printf("ok   %s %s refused at creation: %v\n", backend, classed.Name, err)
	case err != nil:
		fail("%s %s: refused, but not by qgpu-nvidia-runtime-class: %v", backend, classed.Name, err)
	default:
		fail("%s %s: the apiserver created a pod with runtimeClassName %s and NVIDIA_VISIBLE_DEVICES=all", backend, classed.Name, class)
	}
	if err := deleteAndWait(ctx, cp, "app.kubernetes.io/part-of="+backendsLabel); err != nil {
		fail("deleting %s's pods: %v", backend, err)
	}
	return tally, failures
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
// prove nothing about it. It returns the failures it printed.
func runtimeControl(ctx context.Context, o options, cp *harness.ControlPlane, n *node, cards int) int {
	c := corev1.Container{Name: "probe", Image: o.repo + "/probe:" + o.version, ImagePullPolicy: corev1.PullNever,
		Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}}
	if err := optedOutNamespace(ctx, cp, controlNamespace); err != nil {
		fmt.Printf("FAIL control on %s: %v\n", n.name, err)
		return 1
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
		return 1
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
		return 1
	}
	fmt.Printf("ok   control on %s (%s): a pod of an opted-out namespace under RuntimeClass nvidia with NVIDIA_VISIBLE_DEVICES=all sees %d of %d cards\n", n.name, n.mode, seen, cards)
	return 0
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
