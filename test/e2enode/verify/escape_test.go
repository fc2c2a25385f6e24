package verify

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestDeviceAttempts(t *testing.T) {
	own := Line{Kind: "own", Name: "nvidia1", Value: "open: no such device or address"}
	for _, tc := range []struct {
		name    string
		lines   []Line
		want    []Outcome
		problem string
	}{
		{"the cgroup refused", []Line{own, {Kind: "escape", Name: "nvidia0", Value: "refused: open: operation not permitted"}},
			[]Outcome{Refused}, ""},
		{"mknod without CAP_MKNOD is apart", []Line{own, {Kind: "escape", Name: "nvidia2", Value: "refused: mknod: operation not permitted"}},
			[]Outcome{Apart}, ""},
		{"a minor the node lacks is apart", []Line{own, {Kind: "escape", Name: "nvidia5", Value: "refused: open: operation not permitted"}},
			[]Outcome{Apart}, ""},
		{"no writable directory is not an attempt", []Line{own, {Kind: "escape", Name: "nvidia0", Value: "not attempted: no writable directory to make a device node in"}},
			[]Outcome{NotAttempted}, ""},
		{"the old refused line for no directory is not an attempt either", []Line{own, {Kind: "escape", Name: "nvidia0", Value: "refused: no writable directory to make a device node in"}},
			[]Outcome{NotAttempted}, ""},
		{"the cgroup let one through", []Line{own, {Kind: "escape", Name: "nvidia0", Value: "open: no such device or address"}},
			[]Outcome{Escaped}, ""},
		{"own card refused too", []Line{{Kind: "own", Name: "nvidia1", Value: "refused: open: operation not permitted"},
			{Kind: "escape", Name: "nvidia0", Value: "refused: open: operation not permitted"}}, []Outcome{Refused}, "cannot tell"},
		{"no attempt", []Line{own}, nil, "tried no other card"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := DeviceAttempts(tc.lines, 4)
			var outcomes []Outcome
			for _, a := range got {
				outcomes = append(outcomes, a.Outcome)
			}
			if !slices.Equal(outcomes, tc.want) {
				t.Errorf("outcomes %v, want %v", outcomes, tc.want)
			}
			checkProblem(t, problems, tc.problem)
		})
	}
}

// TestTally: what is counted, what is apart, and what fails.
func TestTally(t *testing.T) {
	dev := func(name string, o Outcome) Attempt { return Attempt{Key: DeviceKey(name), Outcome: o, Detail: "x"} }
	open := Controls{DeviceKey("nvidia0"): true, DeviceKey("nvidia2"): true, DeviceKey("nvidia3"): false}
	for _, tc := range []struct {
		name     string
		attempts []Attempt
		controls Controls
		want     Count // Apart and Problems compared by size
		apart    int
		problem  string
	}{
		{"refused with an escaping control", []Attempt{dev("nvidia0", Refused), dev("nvidia2", Refused)}, open,
			Count{Attempts: 2, Refused: 2, Controls: 2, Escaped: 2}, 0, ""},
		{"kernel-refused attempts are not counted", []Attempt{dev("nvidia0", Refused), {Key: DeviceKey("nvidia2"), Outcome: Apart, Detail: ApartNoMknod}}, open,
			Count{Attempts: 1, Refused: 1, Controls: 1, Escaped: 1}, 1, ""},
		{"an escape fails", []Attempt{dev("nvidia0", Escaped)}, open, Count{Attempts: 1, Controls: 1, Escaped: 1}, 0, "escaped"},
		{"could not attempt fails and is not counted", []Attempt{dev("nvidia0", NotAttempted)}, open, Count{}, 0, "could not attempt"},
		{"a control refused too fails", []Attempt{dev("nvidia3", Refused)}, open, Count{Attempts: 1, Refused: 1, Controls: 1}, 0, "control was refused too"},
		{"no control fails", []Attempt{dev("nvidia1", Refused)}, open, Count{Attempts: 1, Refused: 1}, 0, "without a control"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Tally(tc.attempts, tc.controls)
			if got.Attempts != tc.want.Attempts || got.Refused != tc.want.Refused || got.Controls != tc.want.Controls || got.Escaped != tc.want.Escaped {
				t.Errorf("%s, want %s", got.Line(), tc.want.Line())
			}
			if n := len(got.Apart); n != tc.apart {
				t.Errorf("apart %v, want %d reasons", got.Apart, tc.apart)
			}
			checkProblem(t, got.Problems, tc.problem)
		})
	}
}

// TestKernelRefusedNotCounted: the uid 65534 probe's lines (mknod refused
// for want of CAP_MKNOD, before any device cgroup) and a minor the node
// has no card of must count nothing, even against controls that escaped;
// the line then falls short of the minimum instead of passing.
func TestKernelRefusedNotCounted(t *testing.T) {
	var lines []Line
	for i := range 8 {
		lines = append(lines, Line{Kind: "escape", Name: fmt.Sprintf("nvidia%d", i), Value: "refused: mknod: operation not permitted"})
	}
	attempts, problems := DeviceAttempts(lines, 4)
	checkProblem(t, problems, "")
	controls := Controls{}
	for i := range 8 {
		controls[DeviceKey(fmt.Sprintf("nvidia%d", i))] = true
	}
	c := Tally(attempts, controls)
	if c.Attempts != 0 || c.Refused != 0 {
		t.Errorf("kernel-refused attempts counted: %s", c.Line())
	}
	if c.Apart[ApartNoMknod] != 4 || c.Apart[ApartNoCard] != 4 {
		t.Errorf("apart %v, want 4 without CAP_MKNOD and 4 without a card", c.Apart)
	}
	if !c.Failed(6) {
		t.Errorf("a line of kernel refusals alone passed")
	}
}

func TestEnvAttemptsAndControls(t *testing.T) {
	tried := []corev1.EnvVar{{Name: "CUDA_DEVICE_SM_LIMIT_0", Value: "100"}, {Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
	attempts := EnvAttempts([]Line{{Kind: "env", Name: "CUDA_DEVICE_SM_LIMIT_0", Value: "20"},
		{Kind: "env", Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}, tried)
	if attempts[0].Outcome != Refused || attempts[1].Outcome != Escaped {
		t.Errorf("attempts %+v", attempts)
	}
	controls := EnvControls([]Line{{Kind: "env", Name: "CUDA_DEVICE_SM_LIMIT_0", Value: "100"}}, tried)
	if !controls[EnvKey("CUDA_DEVICE_SM_LIMIT_0")] || controls[EnvKey("NVIDIA_VISIBLE_DEVICES")] {
		t.Errorf("controls %v", controls)
	}
	c := Tally(attempts, controls)
	checkProblem(t, c.Problems, "kept its own NVIDIA_VISIBLE_DEVICES=all")
	checkProblem(t, c.Problems, "control was refused too")
}

func TestDeviceControls(t *testing.T) {
	c := DeviceControls([]Line{{Kind: "escape", Name: "nvidia0", Value: "open: no such device or address"},
		{Kind: "escape", Name: "nvidia1", Value: "refused: open: operation not permitted"}})
	if !c[DeviceKey("nvidia0")] || c[DeviceKey("nvidia1")] {
		t.Errorf("controls %v", c)
	}
}

func TestCardsSeen(t *testing.T) {
	if got := CardsSeen([]Line{{Kind: "dev", Name: "null"}}); len(got) > 0 {
		t.Errorf("no cards: %v", got)
	}
	if got := CardsSeen([]Line{{Kind: "dev", Name: "nvidia2"}, {Kind: "dev", Name: "nvidiactl"}}); strings.Join(got, ",") != "/dev/nvidia2,/dev/nvidiactl" {
		t.Errorf("cards: %v", got)
	}
}

// checkProblem: want "" means no problem, else one problem containing it.
func checkProblem(t *testing.T, problems []string, want string) {
	t.Helper()
	if want == "" {
		if len(problems) > 0 {
			t.Errorf("problems %v", problems)
		}
		return
	}
	for _, p := range problems {
		if strings.Contains(p, want) {
			return
		}
	}
	t.Errorf("problems %v, want one with %q", problems, want)
}

func TestDriverFiles(t *testing.T) {
	good := []Line{{Kind: "lib", Name: "libcuda.so.550.54.15"}, {Kind: "lib", Name: "libcuda.so", Value: "libcuda.so.1"}}
	checkProblem(t, DriverFiles(good, "550.54.15"), "")
	checkProblem(t, DriverFiles(good[:1], "550.54.15"), "nvidia-cdi-hook create-symlinks")
	checkProblem(t, DriverFiles(good[1:], "550.54.15"), "libcuda.so.550.54.15")
}
