package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qgpu-scheduler/qgpu/internal/version"
)

// The shipped Deployment runs the scheduler with a read-only root file
// system and nothing writable at /tmp. A TMPDIR that cannot be written
// stands for that: starting must not need it unless a kubeconfig has to be
// written into a --config profile.
func TestRunWithoutWritableTemp(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("KUBECONFIG", "")
	var out, errOut bytes.Buffer
	if code := run([]string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("--help with an unwritable temp dir: exit %d, stderr %q", code, errOut.String())
	}
	if !strings.Contains(out.String(), "qgpu-scheduler") {
		t.Errorf("--help printed %q", out.String())
	}
}

func TestRunVersion(t *testing.T) {
	old := version.Version
	version.Version = "v1.2.3-4-gabcdef0"
	t.Cleanup(func() { version.Version = old })
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	var out, errOut bytes.Buffer
	if code := run([]string{"--version"}, &out, &errOut); code != 0 {
		t.Fatalf("--version: exit %d, stderr %q", code, errOut.String())
	}
	if got, want := out.String(), "qgpu-scheduler v1.2.3-4-gabcdef0\n"; got != want {
		t.Errorf("--version printed %q, want %q", got, want)
	}
}

// With --config and a kubeconfig the effective profile is written into a
// temp dir, which run removes again.
func TestRunRemovesItsTempDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	run([]string{"--config=" + cfg, "--kubeconfig=/nonexistent", "--help"}, &out, &errOut)
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("left behind in TMPDIR: %v", left)
	}
}

// --help describes --kubeconfig as this binary treats it (honoured with
// --config), not as stock kube-scheduler's help does (ignored).
func TestHelpKubeconfig(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	var out, errOut bytes.Buffer
	if code := run([]string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("--help: exit %d, stderr %q", code, errOut.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if !strings.Contains(line, "--kubeconfig string") {
			continue
		}
		if strings.Contains(line, "ignored") || !strings.Contains(line, "honoured with --config too") {
			t.Errorf("--kubeconfig's help: %q", line)
		}
		return
	}
	t.Errorf("--help lists no --kubeconfig")
}
