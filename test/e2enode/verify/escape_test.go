package verify

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestDeviceEscapes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lines   []Line
		want    Tally
		problem string
	}{
		{"all refused", []Line{{Kind: "own", Name: "nvidia1", Value: "open: no such device or address"},
			{Kind: "escape", Name: "nvidia0", Value: "refused: open: operation not permitted"},
			{Kind: "escape", Name: "nvidia2", Value: "refused: mknod: operation not permitted"}}, Tally{2, 2}, ""},
		{"the cgroup let one through", []Line{{Kind: "own", Name: "nvidia1", Value: "open: no such device or address"},
			{Kind: "escape", Name: "nvidia0", Value: "open: no such device or address"}}, Tally{1, 0}, "reached another card's /dev/nvidia0"},
		{"opened", []Line{{Kind: "escape", Name: "nvidia3", Value: "opened"}}, Tally{1, 0}, "reached another card's /dev/nvidia3"},
		{"own card refused too", []Line{{Kind: "own", Name: "nvidia1", Value: "refused: open: operation not permitted"},
			{Kind: "escape", Name: "nvidia0", Value: "refused: open: operation not permitted"}}, Tally{1, 1}, "cannot tell"},
		{"no attempt", []Line{{Kind: "own", Name: "nvidia1", Value: "open: no such device or address"}}, Tally{}, "tried no other card"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := DeviceEscapes(tc.lines)
			if got != tc.want {
				t.Errorf("tally %+v, want %+v", got, tc.want)
			}
			checkProblem(t, problems, tc.problem)
		})
	}
}

func TestEnvEscapes(t *testing.T) {
	tried := []corev1.EnvVar{{Name: "CUDA_DEVICE_SM_LIMIT_0", Value: "100"}, {Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
	got, problems := EnvEscapes([]Line{{Kind: "env", Name: "CUDA_DEVICE_SM_LIMIT_0", Value: "20"},
		{Kind: "env", Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}, tried)
	if got != (Tally{2, 1}) {
		t.Errorf("tally %+v", got)
	}
	checkProblem(t, problems, "kept its own NVIDIA_VISIBLE_DEVICES=all")
}

func TestNoCards(t *testing.T) {
	if got, problems := NoCards([]Line{{Kind: "dev", Name: "null"}}); got != (Tally{1, 1}) || len(problems) > 0 {
		t.Errorf("no cards: %+v %v", got, problems)
	}
	got, problems := NoCards([]Line{{Kind: "dev", Name: "nvidia2"}, {Kind: "dev", Name: "nvidiactl"}})
	if got != (Tally{1, 0}) {
		t.Errorf("cards: %+v", got)
	}
	checkProblem(t, problems, "/dev/nvidia2, /dev/nvidiactl")
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
