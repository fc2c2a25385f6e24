package command

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWithKubeconfigWritesOnlyWhenNeeded(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("kind: KubeSchedulerConfiguration\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refuse := func() (string, error) { return "", errors.New("read-only file system") }
	t.Setenv("KUBECONFIG", "")
	for _, args := range [][]string{nil, {"--help"}, {"--config=" + cfg}, {"--kubeconfig=/k"}} {
		got, err := WithKubeconfig(args, refuse)
		if err != nil {
			t.Errorf("%v: %v", args, err)
		}
		if strings.Join(got, " ") != strings.Join(args, " ") {
			t.Errorf("%v rewritten to %v", args, got)
		}
	}
	dir := t.TempDir()
	got, err := WithKubeconfig([]string{"--config", cfg, "--kubeconfig=/k"}, func() (string, error) { return dir, nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "--config="+dir+"/") {
		t.Fatalf("rewritten args %v", got)
	}
	raw, err := os.ReadFile(strings.TrimPrefix(got[0], "--config="))
	if err != nil || !strings.Contains(string(raw), "kubeconfig: /k") {
		t.Errorf("effective profile %q, %v", raw, err)
	}
	if _, err := WithKubeconfig([]string{"--config=" + cfg, "--kubeconfig=/k"}, refuse); err == nil {
		t.Error("an unwritable dir was not reported when a file had to be written")
	}
}
