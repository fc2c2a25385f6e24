package app

import (
	"bytes"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/qgpu-scheduler/qgpu/internal/version"
)

// Both spellings print the stamped version without contacting a cluster.
func TestVersion(t *testing.T) {
	old := version.Version
	version.Version = "v1.2.3-4-gabcdef0"
	t.Cleanup(func() { version.Version = old })
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out bytes.Buffer
		cmd := NewCommand(genericiooptions.IOStreams{Out: &out, ErrOut: &out})
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if got, want := out.String(), "kubectl-qgpu v1.2.3-4-gabcdef0\n"; got != want {
			t.Errorf("%v printed %q, want %q", args, got, want)
		}
	}
}
