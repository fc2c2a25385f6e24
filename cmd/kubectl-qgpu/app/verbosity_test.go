package app

import (
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// -v is klog's verbosity on every subcommand, as kubectl passes it to a
// plugin; the version is --version only.
func TestVerbosityFlag(t *testing.T) {
	setLevel := func(v string) {
		var l klog.Level
		if err := l.Set(v); err != nil { // klog's verbosity is global
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { setLevel("0") })
	cases := []struct {
		name       string
		args       []string
		wantErr    string
		wantStdout string
		level      klog.Level
	}{
		{"after the subcommand", []string{"nodes", "-v=6", "-o", "name"}, "", "node/n1\nnode/n2\n", 6},
		{"before it", []string{"-v=4", "pods", "-A", "-o", "name"}, "", "pod/a\npod/b\n", 4},
		{"long form, spaced", []string{"quota", "-A", "--v", "2", "-o", "name"}, "", "", 2},
		{"check", []string{"check", "-v=6"}, "", "violations 0\n", 6},
		{"--version still prints the version", []string{"--version"}, "", "kubectl-qgpu ", 0},
		{"-v alone is no longer --version", []string{"-v"}, "flag needs an argument", "", 0},
		{"a verbosity is a number", []string{"nodes", "-v=x"}, `invalid argument "x" for "-v, --v" flag`, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			setLevel("0")
			out, _, _, err := run(t, cluster(t), nil, tc.args...)
			if wantError(t, err, tc.wantErr) {
				return
			}
			if !strings.HasPrefix(out, tc.wantStdout) {
				t.Errorf("stdout %q, want %q", out, tc.wantStdout)
			}
			if !klog.V(tc.level).Enabled() || klog.V(tc.level+1).Enabled() {
				t.Errorf("klog verbosity is not %d", tc.level)
			}
		})
	}
}
