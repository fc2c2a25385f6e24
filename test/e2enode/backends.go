package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/e2enode/verify"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

const backendsLabel = "qgpu-e2e-backends"

// commonOverrides are what a pod that tries to get more than its slice
// sets in its own spec under every backend: every card, and the agent's
// own totals widened; backendOverrides add every limit variable of each
// backend, in its per-card forms too (HAMi-core reads
// CUDA_DEVICE_SM_LIMIT_<i> before CUDA_DEVICE_SM_LIMIT, for any i below 16).
// The overriding pod sets all of them; each backend's line counts the
// common ones and its own.
var (
	commonOverrides = []corev1.EnvVar{
		{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}, {Name: "QGPU_MEMORY_GIB", Value: "999"}, {Name: "QGPU_CORES", Value: "100"},
	}
	backendOverrides = map[string][]corev1.EnvVar{
		"hami-core": {
			{Name: "CUDA_DEVICE_MEMORY_LIMIT_0", Value: "99999m"}, {Name: "CUDA_DEVICE_MEMORY_LIMIT_1", Value: "99999m"},
			{Name: "CUDA_DEVICE_SM_LIMIT", Value: "100"}, {Name: "CUDA_DEVICE_SM_LIMIT_0", Value: "100"},
			{Name: "CUDA_DEVICE_SM_LIMIT_15", Value: "100"}, {Name: "GPU_CORE_UTILIZATION_POLICY", Value: "disable"},
			{Name: "CUDA_DEVICE_MEMORY_SHARED_CACHE", Value: "/tmp/mine.cache"},
		},
		"mps": {
			{Name: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", Value: "0=99999M"}, {Name: "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", Value: "100"},
			{Name: "CUDA_MPS_PIPE_DIRECTORY", Value: "/tmp/elsewhere"},
		},
	}
)

// overrides is every variable the overriding pod sets.
func overrides() []corev1.EnvVar {
	out := slices.Clone(commonOverrides)
	for _, b := range []string{"hami-core", "mps"} {
		out = append(out, backendOverrides[b]...)
	}
	return out
}

// variant is one probe pod of a backend's phase: plain, overriding every
// variable (as root), or overriding as a user other than root (uid 65534:
// no CAP_MKNOD, and the directories the backend mounts must still be
// writable by it).
type variant struct {
	name     string
	override bool
	nonRoot  bool
	whole    bool // a whole card (mps only: the card must leave MPS)
}

var variants = []variant{{name: "plain"}, {name: "override", override: true}, {name: "nonroot", override: true, nonRoot: true},
	{name: "whole", whole: true}}

// checkBackends runs, on node n relabelled to each backend in turn
// (policy fixed-share, so that every limit applies), the probe pods of
// variants and the escape attempts (escapes.go), and checks from inside
// each what it got: exactly its card's device nodes, the backend's files,
// directories and variables, and the agent's values whatever the pod set.
// The examples are deleted first, to free the cards. The controls run
// first (escapeControls), the backend-independent attempts last, once
// (nodeEscapes).
func checkBackends(ctx context.Context, start time.Time, o options, cp *harness.ControlPlane, n *node) result {
	var res result
	fail := func(format string, args ...any) {
		res.failures++
		fmt.Printf("FAIL "+format+"\n", args...)
	}
	if err := deleteAndWait(ctx, cp, "app.kubernetes.io/part-of=qgpu-examples"); err != nil {
		fail("deleting the examples: %v", err)
		return res
	}
	stepLog(start, "examples deleted; backends on %s", n.name)
	controls, cres := escapeControls(ctx, o, cp, n, os.Stdout)
	res.add(cres)
	for _, backend := range []string{"env", "hami-core", "mps"} {
		if err := labelNode(ctx, cp, n.name, map[string]string{protocol.LabelEnforcement: backend,
			protocol.LabelSchedulePolicy: string(protocol.PolicyFixedShare)}); err != nil {
			fail("labelling %s %s: %v", n.name, backend, err)
			continue
		}
		if backend == "mps" {
			// runBackendPod still retries (the agent's informer may lag
			// the label).
			if err := waitMPSDaemon(ctx, cp, n); err != nil {
				fail("%v", err)
			}
		}
		res.add(checkBackend(ctx, o, cp, n, backend, controls))
		stepLog(start, "backend %s checked on %s", backend, n.name)
	}
	res.add(nodeEscapes(ctx, o, cp, n))
	return res
}

// checkBackend runs one backend's probe pods and escape attempts on n and
// prints its escape line, each attempt tallied against controls.
func checkBackend(ctx context.Context, o options, cp *harness.ControlPlane, n *node, backend string, controls verify.Controls) result {
	var res result
	fail := func(format string, args ...any) {
		res.failures++
		fmt.Printf("FAIL "+format+"\n", args...)
	}
	var attempts []verify.Attempt
	for _, v := range variants {
		if v.whole && backend != "mps" {
			continue
		}
		p, lines, err := runBackendPod(ctx, o, cp, n, backend, v)
		res.containers++
		if err != nil {
			fail("%s: %v", backend, err)
			continue
		}
		var problems []string
		if v.whole {
			problems = wholeCardProblems(p, lines, n)
		} else {
			problems = append(backendProblems(backend, p, lines), n.driverProblems(lines)...)
		}
		if backend == "mps" && !v.whole {
			problems = append(problems, mpsCeilingProblems(p, n)...)
		}
		if v.override {
			a, ownProblems := escapeAttempts(backend, lines, cardCount(o.fakeCards))
			attempts = append(attempts, a...)
			problems = append(problems, ownProblems...)
		}
		if len(problems) > 0 {
			fail("%s %s: %s", backend, p.Name, strings.Join(problems, "; "))
		} else {
			fmt.Printf("ok   %s %s on %s: its card, files, directories and variables%s%s\n", backend, p.Name, n.name, verify.EscapeSummary(lines), ceilingNote(backend, v))
		}
		if backend == "mps" && v.name == "override" {
			if err := restartAgentKeepsMPS(ctx, cp, n.name, p.Name); err != nil {
				fail("mps: restarting the agent: %v", err)
			} else {
				fmt.Printf("ok   mps: the agent on %s restarted; the MPS control daemon and %s kept running\n", n.name, p.Name)
			}
		}
		if err := deleteAndWait(ctx, cp, "app.kubernetes.io/part-of="+backendsLabel); err != nil {
			fail("deleting %s: %v", p.Name, err)
		}
	}
	res.failures += escapeLine(n.name, backend, verify.Tally(attempts, controls), minEscapeAttempts)
	return res
}

// escapeAttempts are an overriding probe's attempts: the variables it set
// (the common ones and its backend's) and the other cards of the node
// (cards of them) it tried to open through device nodes of its own.
func escapeAttempts(backend string, lines []verify.Line, cards int) ([]verify.Attempt, []string) {
	attempts := verify.EnvAttempts(lines, append(slices.Clone(commonOverrides), backendOverrides[backend]...))
	dev, problems := verify.DeviceAttempts(lines, cards)
	return append(attempts, dev...), problems
}

// minEscapeAttempts is the fewest counted attempts a node and backend's
// line may hold: fewer means the probes did not try what they should.
const minEscapeAttempts = 6

// escapeLine prints the line of a node and backend ("(node)" for the
// backend-independent attempts), the attempts listed apart and every
// problem, and returns its failures: a problem, an attempt not refused, a
// counted attempt without a control that got through, or fewer than min.
func escapeLine(node, backend string, c verify.Count, min int) int {
	return escapeLineTo(os.Stdout, node, backend, c, min)
}

// escapeLineTo is escapeLine writing to out (the DRA leg's buffer).
func escapeLineTo(out io.Writer, node, backend string, c verify.Count, min int) int {
	fmt.Fprintf(out, "%s %s: %s\n", node, backend, c.Line())
	if note := c.ApartNote(); note != "" {
		fmt.Fprintf(out, "     %s %s: not counted: %s\n", node, backend, note)
	}
	if !c.Failed(min) {
		return 0
	}
	for _, p := range c.Problems {
		fmt.Fprintf(out, "FAIL %s %s: %s\n", node, backend, p)
	}
	fmt.Fprintf(out, "FAIL %s %s: %s (want at least %d, all refused, each with a control that escaped)\n", node, backend, c.Line(), min)
	return 1
}

// backendProblems is the verdict on one probe's output (the probe pods
// hold 20 cores).
func backendProblems(backend string, p *corev1.Pod, lines []verify.Line) []string {
	return append(verify.Container(p, "probe", lines, DeviceRoot), deliveryProblems(backend, p, lines, 20)...)
}

// deliveryProblems is the verdict on what the backend itself delivered to
// a one-card probe of cores under policy fixed-share, beside its card and
// the QGPU_* variables (verify.Container): nothing more for env;
// HAMi-core's library, preload, region and per-card lock directories and
// limits; MPS's read-only pipe directory, the card's shared memory, the
// pinned memory limit and the thread percentage. The device-plugin leg's
// probes and the DRA leg's claims (dra_backends.go) share it.
func deliveryProblems(backend string, p *corev1.Pod, lines []verify.Line, cores int64) []string {
	c := strconv.FormatInt(cores, 10)
	switch backend {
	case "hami-core":
		return append(verify.HAMiCore(p, "probe", lines, true), verify.Env(lines, map[string]string{"CUDA_DEVICE_SM_LIMIT": c, "CUDA_DEVICE_SM_LIMIT_0": c,
			"CUDA_DEVICE_SM_LIMIT_15": c, "GPU_CORE_UTILIZATION_POLICY": "force"})...)
	case "mps":
		return append(verify.MPS(p, "probe", lines), verify.Env(lines, map[string]string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": c})...)
	}
	return nil
}

// runBackendPod creates the probe pod and returns it with its output. The
// agent sees the node's new label through its informer, and the mps
// backend needs the control daemon the label brings: a plain pod admitted
// before either (refused, or answered by the previous backend) is deleted
// and made again, a bounded number of times. The other variants run only
// after a plain one got the backend, so they are never retried.
func runBackendPod(ctx context.Context, o options, cp *harness.ControlPlane, n *node, backend string, v variant) (*corev1.Pod, []verify.Line, error) {
	var last error
	for attempt := 1; attempt <= 6; attempt++ {
		p := backendPod(fmt.Sprintf("be-%s-%s-%d", backend, v.name, attempt), n.name, o, v)
		p, err := cp.Client.CoreV1().Pods(examplesNamespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return nil, nil, err
		}
		p, err = waitPodSettled(ctx, cp, p.Name)
		if err == nil {
			var lines []verify.Line
			if lines, err = containerOutput(n.dir, p, "probe"); err == nil {
				if got := verify.Backend(lines); got == backend || v.override || v.whole {
					return p, lines, nil
				}
				err = fmt.Errorf("answered by the %s backend", verify.Backend(lines))
			}
		}
		last = fmt.Errorf("%s (attempt %d): %w", p.Name, attempt, err)
		fmt.Println("  retrying:", last)
		if err := deleteAndWait(ctx, cp, "app.kubernetes.io/part-of="+backendsLabel); err != nil {
			return nil, nil, err
		}
	}
	return nil, nil, last
}

func backendPod(name, node string, o options, v variant) *corev1.Pod {
	c := corev1.Container{Name: "probe", Image: o.repo + "/probe:" + o.version, ImagePullPolicy: corev1.PullNever,
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			protocol.ResourceMemory: resource.MustParse("2"), protocol.ResourceCore: resource.MustParse("20")}}}
	if v.override {
		c.Env = overrides()
	}
	if v.whole {
		c.Resources.Limits[protocol.ResourceCore] = resource.MustParse("100")
	}
	if v.nonRoot {
		uid := int64(65534)
		c.SecurityContext = &corev1.SecurityContext{RunAsUser: &uid, RunAsGroup: &uid}
	}
	return probePod(name, node, c)
}

// probePod is a pod of the backends' phase running c on node.
func probePod(name, node string, c corev1.Container) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: examplesNamespace,
			Labels: map[string]string{"app.kubernetes.io/part-of": backendsLabel}},
		Spec: corev1.PodSpec{SchedulerName: "qgpu-scheduler", NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Containers: []corev1.Container{c}, TerminationGracePeriodSeconds: &grace},
	}
}

// wholeCardProblems checks a whole-card probe on an mps node: its card and
// nothing of MPS (no pipe directory, no MPS variable), and the control
// daemon marked its card whole on the node (out of MPS and
// EXCLUSIVE_PROCESS, so that the pod may run several CUDA processes).
func wholeCardProblems(p *corev1.Pod, lines []verify.Line, n *node) []string {
	problems := append(verify.Container(p, "probe", lines, DeviceRoot), n.driverProblems(lines)...)
	for _, l := range lines {
		if (l.Kind == "env" && strings.HasPrefix(l.Name, "CUDA_MPS_")) || (l.Kind == "mount" && l.Target == "/tmp/nvidia-mps") {
			problems = append(problems, "a whole card with MPS: "+l.Name+l.Target)
		}
	}
	a, err := protocol.DecodeAssignment([]byte(p.Annotations[protocol.AnnotationAssignment]))
	if err != nil || len(a.Containers) == 0 || len(a.Containers[0].Slices) == 0 {
		return append(problems, fmt.Sprintf("assignment: %v", err))
	}
	uuid := a.Containers[0].Slices[0].UUID
	if _, err := os.Stat(filepath.Join(n.dir, "run-qgpu", "mps", uuid, enforce.MPSWholeFile)); err != nil {
		problems = append(problems, "the MPS control daemon did not mark card "+uuid+" whole: "+err.Error())
	}
	return problems
}

// mpsCeilingProblems checks the daemon-side ceiling the control daemon
// marked in force on a shared probe's card, as read on the node (the
// daemon is simulated there: it checks the agent's ceiling file and marks
// it in force without a control binary; docs/real-node.md).
func mpsCeilingProblems(p *corev1.Pod, n *node) []string {
	a, err := protocol.DecodeAssignment([]byte(p.Annotations[protocol.AnnotationAssignment]))
	if err != nil || len(a.Containers) == 0 || len(a.Containers[0].Slices) == 0 {
		return []string{fmt.Sprintf("assignment: %v", err)}
	}
	path := filepath.Join(n.dir, "run-qgpu", "mps", a.Containers[0].Slices[0].UUID, enforce.MPSCeilingAppliedFile)
	applied, err := os.ReadFile(path)
	if err != nil {
		return []string{"no MPS ceiling in force: " + err.Error()}
	}
	return verify.MPSCeiling(p, "probe", string(applied))
}

func ceilingNote(backend string, v variant) string {
	if backend != "mps" || v.whole {
		return ""
	}
	return "; the MPS ceiling in force on its card is its slice"
}
