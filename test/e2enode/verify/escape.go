package verify

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Outcome is how one attempt to get more than a slice was answered.
type Outcome int

const (
	// Refused: a guard answered no.
	Refused Outcome = iota
	// Escaped: the attempt got what it tried.
	Escaped
	// Apart: the kernel or the runtime refuses it whatever qGPU does, or
	// there is nothing to reach (a card the node does not have). Listed
	// with its reason, never counted: counting it would make the line
	// claim a refusal qGPU had no part in.
	Apart
	// NotAttempted: the probe could not make the attempt. A failure: a
	// refusal cannot be read into it.
	NotAttempted
)

// Attempt is one attempt and its verdict. Key names what was tried, the
// same key its control carries (DeviceKey, EnvKey).
type Attempt struct {
	Key     string
	Outcome Outcome
	// Detail is the probe's verdict, or for Apart the reason.
	Detail string
}

// Controls are the same attempts made in the same run with qGPU's guard
// removed (an open device cgroup, no agent edits, no admission policy),
// by key: true where the control got through.
type Controls map[string]bool

// Count is a tally of attempts against their controls.
type Count struct {
	// Attempts are the counted attempts, Refused those of them refused.
	Attempts, Refused int
	// Controls are the counted attempts that had a control, Escaped those
	// whose control got through.
	Controls, Escaped int
	// Apart counts the attempts listed apart, by reason.
	Apart map[string]int
	// Problems are the failures: an attempt that escaped, one that could
	// not be made, a counted attempt without a control or whose control
	// was refused too (the count would then claim what no one showed).
	Problems []string
}

// Tally counts attempts against controls: an attempt is counted only when
// it is neither apart nor unattempted, and each counted attempt needs a
// control that got through.
func Tally(attempts []Attempt, controls Controls) Count {
	c := Count{Apart: map[string]int{}}
	for _, a := range attempts {
		switch a.Outcome {
		case Apart:
			c.Apart[a.Detail]++
			continue
		case NotAttempted:
			c.Problems = append(c.Problems, fmt.Sprintf("%s: could not attempt (%s)", a.Key, a.Detail))
			continue
		}
		c.Attempts++
		if a.Outcome == Refused {
			c.Refused++
		} else {
			c.Problems = append(c.Problems, fmt.Sprintf("%s: escaped (%s)", a.Key, a.Detail))
		}
		escaped, ok := controls[a.Key]
		switch {
		case !ok:
			c.Problems = append(c.Problems, fmt.Sprintf("%s: counted without a control", a.Key))
		case !escaped:
			c.Controls++
			c.Problems = append(c.Problems, fmt.Sprintf("%s: its control was refused too, so its refusal is not qGPU's: a bug in the count", a.Key))
		default:
			c.Controls++
			c.Escaped++
		}
	}
	return c
}

// Add adds o's counts.
func (c *Count) Add(o Count) {
	c.Attempts += o.Attempts
	c.Refused += o.Refused
	c.Controls += o.Controls
	c.Escaped += o.Escaped
	if c.Apart == nil {
		c.Apart = map[string]int{}
	}
	for k, v := range o.Apart {
		c.Apart[k] += v
	}
	c.Problems = append(c.Problems, o.Problems...)
}

// Line is "escape attempts N refused N, controls N escaped N".
func (c Count) Line() string {
	return fmt.Sprintf("escape attempts %d refused %d, controls %d escaped %d", c.Attempts, c.Refused, c.Controls, c.Escaped)
}

// ApartNote lists the attempts not counted, by reason ("" when none).
func (c Count) ApartNote() string {
	var reasons []string
	for r := range c.Apart {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	var parts []string
	for _, r := range reasons {
		parts = append(parts, fmt.Sprintf("%d× %s", c.Apart[r], r))
	}
	return strings.Join(parts, "; ")
}

// Failed reports whether the count fails: a problem, fewer than min
// counted attempts, one not refused, or a control that did not escape.
func (c Count) Failed(min int) bool {
	return len(c.Problems) > 0 || c.Attempts < min || c.Refused != c.Attempts || c.Controls != c.Attempts || c.Escaped != c.Controls
}

// refusedPrefix starts a probe verdict the kernel refused (EPERM, EACCES).
const refusedPrefix = "refused:"

// NotAttemptedPrefix starts a probe line for an attempt it could not make.
const NotAttemptedPrefix = "not attempted:"

// DeviceKey is the key of an attempt on card minor's device node.
func DeviceKey(name string) string { return "device /dev/" + name }

// EnvKey is the key of an attempt through the variable name.
func EnvKey(name string) string { return "env " + name }

// Reasons an attempt is listed apart.
const (
	ApartNoCard  = "a minor the node has no card of (nothing to reach)"
	ApartNoMknod = "mknod refused without CAP_MKNOD (the kernel, before any device cgroup)"
)

// DeviceAttempts classifies the probe's device escape lines on a node
// with cards cards (minors 0..cards-1): an attempt on a card of the node
// the container was not given is counted, refused when open answered
// EPERM or EACCES (the device cgroup); mknod refused (no CAP_MKNOD) and
// minors the node has no card of are listed apart; a line that says
// nothing was attempted is a failure. Its own cards must open past the
// cgroup (ENXIO without a driver), or the refusals would prove nothing:
// that is a problem too.
func DeviceAttempts(lines []Line, cards int) ([]Attempt, []string) {
	var out []Attempt
	var problems []string
	seen := 0
	for _, l := range lines {
		switch l.Kind {
		case "escape":
			seen++
			a := Attempt{Key: DeviceKey(l.Name), Detail: l.Value}
			minor, err := strconv.Atoi(strings.TrimPrefix(l.Name, "nvidia"))
			switch {
			case strings.HasPrefix(l.Value, NotAttemptedPrefix) || strings.Contains(l.Value, "no writable directory"):
				a.Outcome = NotAttempted
			case err != nil || minor >= cards:
				a.Outcome, a.Detail = Apart, ApartNoCard
			case strings.HasPrefix(l.Value, refusedPrefix+" mknod"):
				a.Outcome, a.Detail = Apart, ApartNoMknod
			case strings.HasPrefix(l.Value, refusedPrefix):
				a.Outcome = Refused
			default:
				a.Outcome = Escaped
			}
			out = append(out, a)
		case "own":
			if strings.HasPrefix(l.Value, refusedPrefix) {
				problems = append(problems, fmt.Sprintf("its own /dev/%s refused (%s): the device checks cannot tell the cgroup's refusals", l.Name, l.Value))
			}
		}
	}
	if seen == 0 {
		problems = append(problems, "the probe tried no other card (no escape lines)")
	}
	return out, problems
}

// DeviceControls reads a control probe's device lines (root, the device
// cgroup open): each minor it made a node of and opened past the cgroup
// (ENXIO without a driver) got through.
func DeviceControls(lines []Line) Controls {
	c := Controls{}
	for _, l := range lines {
		if l.Kind == "escape" || l.Kind == "own" {
			c[DeviceKey(l.Name)] = !strings.HasPrefix(l.Value, refusedPrefix) && !strings.HasPrefix(l.Value, NotAttemptedPrefix)
		}
	}
	return c
}

// EnvAttempts judges the variables a pod set in its spec to widen its
// slice: each is counted, refused when the container sees another value
// than the pod's (the agent's, applied after the pod's own).
func EnvAttempts(lines []Line, tried []corev1.EnvVar) []Attempt {
	env := envOf(lines)
	var out []Attempt
	for _, e := range tried {
		a := Attempt{Key: EnvKey(e.Name), Outcome: Refused, Detail: fmt.Sprintf("%s=%s", e.Name, env[e.Name])}
		if got, ok := env[e.Name]; ok && got == e.Value {
			a.Outcome, a.Detail = Escaped, fmt.Sprintf("kept its own %s=%s", e.Name, e.Value)
		}
		out = append(out, a)
	}
	return out
}

// EnvControls reads a control probe that set the same variables and got
// no qGPU resource (no agent edits): each it kept got through.
func EnvControls(lines []Line, tried []corev1.EnvVar) Controls {
	env := envOf(lines)
	c := Controls{}
	for _, e := range tried {
		got, ok := env[e.Name]
		c[EnvKey(e.Name)] = ok && got == e.Value
	}
	return c
}

func envOf(lines []Line) map[string]string {
	env := map[string]string{}
	for _, l := range lines {
		if l.Kind == "env" {
			env[l.Name] = l.Value
		}
	}
	return env
}

// CardsSeen lists the card device nodes and nvidiactl the container sees.
func CardsSeen(lines []Line) []string {
	var seen []string
	for _, l := range lines {
		if l.Kind == "dev" && (cardNode.MatchString(l.Name) || l.Name == "nvidiactl") {
			seen = append(seen, "/dev/"+l.Name)
		}
	}
	return seen
}

// DriverFiles checks that the container got the driver's files the way a
// spec written by NVIDIA's generator (the agent's own card spec) delivers
// them: libcuda.so.<version> mounted, and the libcuda.so link the
// toolkit's create-symlinks hook makes at container creation.
func DriverFiles(lines []Line, version string) []string {
	libs := map[string]string{}
	for _, l := range lines {
		if l.Kind == "lib" {
			libs[l.Name] = l.Value
		}
	}
	var problems []string
	if _, ok := libs["libcuda.so."+version]; !ok {
		problems = append(problems, "no /usr/lib/x86_64-linux-gnu/libcuda.so."+version+" (the card spec's driver files)")
	}
	if target, ok := libs["libcuda.so"]; !ok || target != "libcuda.so.1" {
		problems = append(problems, fmt.Sprintf("libcuda.so links to %q, want libcuda.so.1 (nvidia-cdi-hook create-symlinks)", target))
	}
	return problems
}

// EscapeSummary is a note for the log: how the probe's device escapes
// were answered ("" without any).
func EscapeSummary(lines []Line) string {
	counts := map[string]int{}
	var order []string
	for _, l := range lines {
		if l.Kind != "escape" {
			continue
		}
		if counts[l.Value] == 0 {
			order = append(order, l.Value)
		}
		counts[l.Value]++
	}
	if len(order) == 0 {
		return ""
	}
	var parts []string
	for _, v := range order {
		parts = append(parts, fmt.Sprintf("%d× %s", counts[v], v))
	}
	return " (other cards: " + strings.Join(parts, ", ") + ")"
}
