package verify

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Tally counts escape attempts and how many of them were refused.
type Tally struct{ Attempts, Refused int }

// Add adds o's counts.
func (t *Tally) Add(o Tally) { t.Attempts += o.Attempts; t.Refused += o.Refused }

// refusedPrefix starts a probe verdict the kernel refused (EPERM, EACCES).
const refusedPrefix = "refused:"

// DeviceEscapes judges the probe's escape lines: each card it was not given
// and tried to reach through a device node of its own making is an
// attempt, refused when mknod or open answered EPERM or EACCES (the device
// cgroup, a missing capability). Its own cards must open past the cgroup
// (ENXIO without a driver): a cgroup that refused them too would make the
// refusals above prove nothing.
func DeviceEscapes(lines []Line) (Tally, []string) {
	var t Tally
	var problems []string
	for _, l := range lines {
		switch l.Kind {
		case "escape":
			t.Attempts++
			if strings.HasPrefix(l.Value, refusedPrefix) {
				t.Refused++
			} else {
				problems = append(problems, fmt.Sprintf("reached another card's /dev/%s through a node of its own: %s", l.Name, l.Value))
			}
		case "own":
			if strings.HasPrefix(l.Value, refusedPrefix) {
				problems = append(problems, fmt.Sprintf("its own /dev/%s refused (%s): the device checks cannot tell the cgroup's refusals", l.Name, l.Value))
			}
		}
	}
	if t.Attempts == 0 {
		problems = append(problems, "the probe tried no other card (no escape lines)")
	}
	return t, problems
}

// EnvEscapes judges the variables a pod set in its spec to widen its
// slice: each is an attempt, refused when the container sees another
// value than the pod's (the agent's, applied after the pod's own).
func EnvEscapes(lines []Line, tried []corev1.EnvVar) (Tally, []string) {
	env := map[string]string{}
	for _, l := range lines {
		if l.Kind == "env" {
			env[l.Name] = l.Value
		}
	}
	var t Tally
	var problems []string
	for _, e := range tried {
		t.Attempts++
		if got, ok := env[e.Name]; ok && got == e.Value {
			problems = append(problems, fmt.Sprintf("kept its own %s=%s", e.Name, e.Value))
			continue
		}
		t.Refused++
	}
	return t, problems
}

// NoCards judges a container that asked for no card but set
// NVIDIA_VISIBLE_DEVICES=all: one attempt, refused when it sees no card's
// device node and no nvidiactl.
func NoCards(lines []Line) (Tally, []string) {
	var seen []string
	for _, l := range lines {
		if l.Kind == "dev" && (cardNode.MatchString(l.Name) || l.Name == "nvidiactl") {
			seen = append(seen, "/dev/"+l.Name)
		}
	}
	if len(seen) > 0 {
		return Tally{Attempts: 1}, []string{"a pod without a qGPU resource sees " + strings.Join(seen, ", ")}
	}
	return Tally{Attempts: 1, Refused: 1}, nil
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
