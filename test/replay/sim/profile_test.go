package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

func TestProfilePolicy(t *testing.T) {
	args := func(name, node, card string) string {
		return "- schedulerName: " + name + "\n  pluginConfig:\n  - name: QGPU\n    args:\n      nodePolicy: " + node + "\n      cardPolicy: " + card + "\n"
	}
	for _, tt := range []struct {
		name, yaml string
		want       placement.Policy
		err        string
	}{
		{"one profile", "profiles:\n" + args("a", "fgd", "fgd"), placement.FGD, ""},
		{"two that agree", "profiles:\n" + args("a", "fgd", "fgd") + args("b", "fgd", "fgd"), placement.FGD, ""},
		{"unset is the plugin's default", "profiles:\n- schedulerName: a\n  pluginConfig:\n  - name: QGPU\n    args: {}\n", placement.FragFit, ""},
		{"card and node differ", "profiles:\n" + args("a", "spread", "binpack"), "", `nodePolicy "spread" and cardPolicy "binpack"`},
		{"profiles disagree", "profiles:\n" + args("a", "fgd", "fgd") + args("b", "spread", "spread"), "", `configure "fgd" and "spread"`},
		{"unknown policy", "profiles:\n" + args("a", "best", "best"), "", `nodePolicy "best" is not one of`},
		{"no QGPU args", "profiles:\n- schedulerName: a\n", "", "no QGPU pluginConfig"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "profile.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ProfilePolicy(path)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %q, %v; want an error with %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
