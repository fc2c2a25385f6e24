package command

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"sigs.k8s.io/yaml"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu"
)

// The shipped profiles rely on the order kube-scheduler runs their plugins
// in: QGPU's PreFilter after NodeResourcesFit's (it takes NodeResourcesFit's
// check of the qGPU resources over from its PreFilter state), QGPU's Filter
// first (it turns full nodes away before the others look), and QGPU's Bind
// before DefaultBinder (the assignment rides on the Binding). This builds
// each profile as the binary does and reads the order back.
func TestShippedProfilesPluginOrder(t *testing.T) {
	for _, file := range []string{"qgpu-scheduler.yaml", "qgpu-scheduler-spread.yaml", "qgpu-scheduler-gang.yaml"} {
		t.Run(file, func(t *testing.T) {
			plugins := buildProfile(t, filepath.Join("..", "..", "..", "config", file))
			prefilter := enabled(plugins.PreFilter)
			if i, j := slices.Index(prefilter, names.NodeResourcesFit), slices.Index(prefilter, qgpu.Name); i < 0 || j < i {
				t.Errorf("PreFilter order %v: want %s before %s", prefilter, names.NodeResourcesFit, qgpu.Name)
			}
			if filter := enabled(plugins.Filter); len(filter) == 0 || filter[0] != qgpu.Name {
				t.Errorf("Filter order %v: want %s first", filter, qgpu.Name)
			}
			bind := enabled(plugins.Bind)
			if i, j := slices.Index(bind, qgpu.Name), slices.Index(bind, names.DefaultBinder); i < 0 || j >= 0 && j < i {
				t.Errorf("Bind order %v: want %s before %s", bind, qgpu.Name, names.DefaultBinder)
			}
		})
	}
}

// buildProfile sets the scheduler up from a profile file (leader election
// off, a kubeconfig to a server that is never contacted) and returns the
// plugins its one profile runs, per extension point, in order.
func buildProfile(t *testing.T, profile string) *config.Plugins {
	t.Helper()
	raw, err := os.ReadFile(profile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(unreachableKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	cfg["clientConnection"] = map[string]any{"kubeconfig": kubeconfig}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, out, 0o600); err != nil {
		t.Fatal(err)
	}
	opts := options.NewOptions()
	opts.ConfigFile = cfgPath
	opts.SecureServing.BindPort = 0
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, sched, err := app.Setup(ctx, opts, Options()...)
	if err != nil {
		t.Fatalf("setting the scheduler up from %s: %v", profile, err)
	}
	if len(sched.Profiles) != 1 {
		t.Fatalf("%s has %d profiles, want 1", profile, len(sched.Profiles))
	}
	for _, fw := range sched.Profiles {
		return fw.ListPlugins()
	}
	return nil
}

func enabled(set config.PluginSet) []string {
	var out []string
	for _, p := range set.Enabled {
		out = append(out, p.Name)
	}
	return out
}

// unreachableKubeconfig points at a port nothing listens on: setting the
// scheduler up builds clients and informers but sends no request.
const unreachableKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:1
contexts:
- name: c
  context:
    cluster: c
    user: u
current-context: c
users:
- name: u
  user:
    token: unused
`
