package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/test/e2enode/verify"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

const (
	systemNamespace   = "qgpu-system"
	examplesNamespace = "default"
	expectLabel       = "examples.qgpu.io/expect"
)

// cardCount counts the cards of an agent --fake-cards spec ("2xT4,1xA100"):
// the e2e program must not link go-nvml (agent/nvml), whose cgo symbols only
// resolve in the agent's own binary.
func cardCount(spec string) int {
	n := 0
	for _, group := range strings.Split(spec, ",") {
		count, _, ok := strings.Cut(group, "x")
		k, err := strconv.Atoi(count)
		if !ok || err != nil {
			return 0
		}
		n += k
	}
	return n
}

// check applies manifests/, then manifests/overlays/colocation (the agent
// of mixed nodes, as a cluster with online and offline pods deploys it), and
// manifests/examples/ through kustomizations that change only the images
// (and give the agents fake cards), waits, and checks every example
// container's own output. manifests/dra and the DRA agent are applied
// with them, and the DRA leg (dra.go) runs on its node beside the other
// checks; its result is res.dra.
func check(ctx context.Context, start time.Time, o options, cp *harness.ControlPlane, allNodes []*node) (res result, err error) {
	nodes, draN := splitDRANode(allNodes)
	root, err := harness.RepoRoot()
	if err != nil {
		return res, err
	}
	// The agents and the MPS control daemon under NVIDIA's runtime class,
	// as GPU Operator's current release sets nodes up.
	runtimeClass := []string{"manifests/overlays/nvidia-runtime-class"}
	system, err := writeKustomization(o, root, "system", "manifests", systemOverrides(o), runtimeClass...)
	if err != nil {
		return res, err
	}
	colocation, err := writeKustomization(o, root, "colocation", "manifests/overlays/colocation", systemOverrides(o), runtimeClass...)
	if err != nil {
		return res, err
	}
	examples, err := writeKustomization(o, root, "examples", "manifests/examples", examplesOverrides(o))
	if err != nil {
		return res, err
	}
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: nvidiaRuntimeClass}, Handler: nvidiaRuntimeClass}
	if _, err := cp.Client.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("RuntimeClass %s: %w", nvidiaRuntimeClass, err)
	}
	if _, err := apply(ctx, cp, system, nil); err != nil {
		return res, err
	}
	if _, err := apply(ctx, cp, colocation, nil); err != nil {
		return res, err
	}
	if err := applyDRA(ctx, o, root, cp); err != nil {
		return res, err
	}
	stepLog(start, "manifests/, manifests/overlays/colocation, manifests/dra and the DRA agent applied")
	if err := harness.WaitRequireScheduler(ctx, cp.Client); err != nil {
		return res, err
	}
	res.failures += waitSystemReady(ctx, cp)
	stepLog(start, "qgpu-system checked")
	var leg *draLeg
	if draN != nil {
		leg = startDRALeg(ctx, start, o, cp, draN)
		defer func() {
			if leg != nil {
				d := leg.wait()
				res.dra = &d
			}
		}()
	}
	if o.draOnly {
		stepLog(start, "--dra-only: the examples, the device-plugin backends and the runtime controls are skipped")
		return res, nil
	}
	ex, err := checkExamples(ctx, start, cp, examples, nodes)
	res.add(ex)
	if err != nil {
		return res, err
	}
	// Every backend on both nodes: their runtime modes differ (runc as
	// default with NVIDIA's runtime as RuntimeClass; NVIDIA's runtime as
	// default).
	for _, n := range nodes {
		res.add(checkBackends(ctx, start, o, cp, n))
	}
	for _, n := range nodes {
		if n.mode.nvidiaDefault && !nvidiaRuntimeRan(n.dir) {
			res.failures++
			fmt.Printf("FAIL %s (%s): NVIDIA's runtime never ran there (%s/nvidia-container-runtime.log)\n", n.name, n.mode, n.dir)
		}
	}
	ex, err = examplesOnOperatorSpecs(ctx, start, o, cp, examples, nodes)
	res.add(ex)
	if err != nil {
		return res, err
	}
	// The tenant suite claims a card's memory on the DRA node: after the
	// DRA leg, whose output is printed here.
	if leg != nil {
		d := leg.wait()
		res.dra, leg = &d, nil
	}
	res.add(tenantChecks(ctx, start, o, cp, nodes, draN))
	stepLog(start, "tenant suite done")
	return res, nil
}

// checkExamples applies the examples, checks that the admission policies
// refused the ones labelled rejected, waits for the others and checks
// every container's own output.
func checkExamples(ctx context.Context, start time.Time, cp *harness.ControlPlane, examples string, nodes []*node) (result, error) {
	var res result
	applied, refused, err := applyExamples(ctx, cp, examples)
	if err != nil {
		return res, err
	}
	stepLog(start, "manifests/examples/ applied")
	// The rejected examples never exist: the shipped admission policies
	// (manifests/admission) refuse them at creation, with the fix named.
	for _, name := range applied.rejected {
		if msg, ok := refused[name]; ok {
			res.rejections++
			fmt.Printf("ok   %s refused at creation: %s\n", name, msg)
		} else {
			res.failures++
			fmt.Printf("FAIL %s (refusal at creation expected): the apiserver created it\n", name)
		}
	}
	pods, err := waitExamples(ctx, cp, applied.pods)
	if err != nil {
		return res, err
	}
	stepLog(start, "examples settled")
	byName := map[string]*node{}
	for _, n := range nodes {
		byName[n.name] = n
	}
	for _, p := range pods {
		if p.Labels[expectLabel] == "rejected" {
			continue // created against the policy: counted above
		}
		for _, c := range p.Spec.Containers {
			res.containers++
			if problems := checkContainer(p, c.Name, byName[p.Spec.NodeName]); len(problems) > 0 {
				res.failures++
				fmt.Printf("FAIL %s/%s container %s: %s\n", p.Namespace, p.Name, c.Name, strings.Join(problems, "; "))
			} else {
				fmt.Printf("ok   %s/%s container %s on %s\n", p.Namespace, p.Name, c.Name, p.Spec.NodeName)
			}
		}
	}
	return res, nil
}

// waitSystemReady waits for every Deployment and DaemonSet in qgpu-system to
// have all its pods Ready, then reports each pod that is not (a failure each).
func waitSystemReady(ctx context.Context, cp *harness.ControlPlane) int {
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		deps, err := cp.Client.AppsV1().Deployments(systemNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		dss, err := cp.Client.AppsV1().DaemonSets(systemNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		return allReady(deps.Items, dss.Items), nil
	})
	failures := 0
	if err != nil {
		failures++
		fmt.Println("FAIL qgpu-system not Ready within 4m:", err)
	}
	pods, err := cp.Client.CoreV1().Pods(systemNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return failures + 1
	}
	for _, p := range pods.Items {
		if podReady(&p) {
			fmt.Printf("ok   %s/%s Ready on %s\n", p.Namespace, p.Name, p.Spec.NodeName)
		} else {
			failures++
			fmt.Printf("FAIL %s/%s not Ready: phase %s %s\n", p.Namespace, p.Name, p.Status.Phase, containerStates(&p))
		}
	}
	return failures
}

func allReady(deps []appsv1.Deployment, dss []appsv1.DaemonSet) bool {
	if len(deps) == 0 || len(dss) == 0 {
		return false
	}
	for _, d := range deps {
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		if d.Status.ReadyReplicas != want || d.Status.UpdatedReplicas != want {
			return false
		}
	}
	for _, ds := range dss {
		// A DaemonSet for nodes that have none yet (the MPS control
		// daemon before a node is labelled mps) is ready once its
		// controller has seen it.
		if ds.Status.ObservedGeneration < ds.Generation || ds.Status.NumberReady != ds.Status.DesiredNumberScheduled {
			return false
		}
	}
	return true
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func containerStates(p *corev1.Pod) string {
	var parts []string
	for _, s := range p.Status.ContainerStatuses {
		st := "running"
		switch {
		case s.State.Waiting != nil:
			st = "waiting " + s.State.Waiting.Reason + ": " + s.State.Waiting.Message
		case s.State.Terminated != nil:
			st = fmt.Sprintf("terminated %s (exit %d)", s.State.Terminated.Reason, s.State.Terminated.ExitCode)
		}
		parts = append(parts, fmt.Sprintf("%s %s, restarts %d", s.Name, st, s.RestartCount))
	}
	return strings.Join(parts, "; ")
}

// waitExamples waits until every example pod has settled: running with
// every container's output complete (want of them; an example labelled
// rejected that the apiserver created is not waited for). It returns the
// pods, sorted by name.
func waitExamples(ctx context.Context, cp *harness.ControlPlane, want int) ([]*corev1.Pod, error) {
	var pods []*corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Client.CoreV1().Pods(examplesNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=qgpu-examples"})
		if err != nil {
			return false, nil
		}
		pods = pods[:0]
		settled, running := true, 0
		for i := range list.Items {
			p := &list.Items[i]
			pods = append(pods, p)
			if p.Labels[expectLabel] == "rejected" {
				continue // created against the policy: a failure already
			}
			settled = settled && p.Status.Phase == corev1.PodRunning
			running++
		}
		return settled && running == want, nil
	})
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	if err != nil {
		for _, p := range pods {
			fmt.Printf("  %s: phase %s node %q %s\n", p.Name, p.Status.Phase, p.Spec.NodeName, containerStates(p))
		}
		return pods, fmt.Errorf("example pods did not settle within 4m: %w", err)
	}
	return pods, nil
}

// checkContainer reads the container's output and checks it
// (verify.Container, and the driver's files where the agent wrote the
// card spec).
func checkContainer(p *corev1.Pod, container string, n *node) []string {
	if n == nil {
		return []string{fmt.Sprintf("pod on unknown node %q", p.Spec.NodeName)}
	}
	lines, err := containerOutput(n.dir, p, container)
	if err != nil {
		return []string{err.Error()}
	}
	return append(verify.Container(p, container, lines, DeviceRoot), n.driverProblems(lines)...)
}

// driverProblems: on a node whose agent writes its own card spec (with
// NVIDIA's generator, from the fake driver root), a container must have the
// driver's files; the device plugin spec of the other node has none.
func (n *node) driverProblems(lines []verify.Line) []string {
	if n.devicePluginSpec {
		return nil
	}
	return verify.DriverFiles(lines, FakeDriverVersion)
}

// containerOutput reads the container's log as the kubelet had containerd
// write it (<node>/pods/<ns>_<pod>_<uid>/<container>/0.log, CRI format
// "<time> stdout F <line>") and decodes the probe's lines, waiting (bounded)
// for its "done" line.
func containerOutput(nodeDir string, p *corev1.Pod, container string) ([]verify.Line, error) {
	if nodeDir == "" {
		return nil, fmt.Errorf("pod on unknown node %q", p.Spec.NodeName)
	}
	path := filepath.Join(nodeDir, "pods", fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), container, "0.log")
	var lines []verify.Line
	var lastErr error
	for attempt := 0; attempt < 30; attempt++ {
		lines, lastErr = verify.ReadLog(path)
		if lastErr == nil {
			return lines, nil
		}
		time.Sleep(time.Second)
	}
	return nil, lastErr
}
