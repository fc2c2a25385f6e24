package command

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
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
// each profile of each file as the binary does and reads the order back.
func TestShippedProfilesPluginOrder(t *testing.T) {
	for _, file := range []string{"qgpu-scheduler.yaml", "qgpu-scheduler-spread.yaml", "qgpu-scheduler-gang.yaml", "qgpu-scheduler-as-default.yaml"} {
		for name, plugins := range buildProfiles(t, filepath.Join("..", "..", "..", "config", file)) {
			t.Run(file+"/"+name, func(t *testing.T) {
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
}

// config/qgpu-scheduler-as-default.yaml serves default-scheduler with every
// plugin the stock kube-scheduler runs, at the stock weights (DynamicResources
// included: other DRA drivers' claims), plus QGPU scoring at weight 10, and
// qgpu-scheduler exactly as config/qgpu-scheduler.yaml does.
func TestAsDefaultProfiles(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "config")
	got := buildProfiles(t, filepath.Join(dir, "qgpu-scheduler-as-default.yaml"))
	if len(got) != 2 || got[corev1.DefaultSchedulerName] == nil || got["qgpu-scheduler"] == nil {
		t.Fatalf("profiles %v, want %s and qgpu-scheduler", slices.Collect(maps.Keys(got)), corev1.DefaultSchedulerName)
	}
	stock := buildProfiles(t, writeConfig(t, "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"))[corev1.DefaultSchedulerName]
	def := got[corev1.DefaultSchedulerName]
	for point, sets := range map[string][2]config.PluginSet{
		"preFilter": {stock.PreFilter, def.PreFilter}, "filter": {stock.Filter, def.Filter},
		"postFilter": {stock.PostFilter, def.PostFilter}, "preScore": {stock.PreScore, def.PreScore},
		"score": {stock.Score, def.Score}, "reserve": {stock.Reserve, def.Reserve},
		"preBind": {stock.PreBind, def.PreBind}, "bind": {stock.Bind, def.Bind},
	} {
		for _, p := range sets[0].Enabled {
			if !slices.Contains(sets[1].Enabled, p) {
				t.Errorf("%s: the stock plugin %s (weight %d) is not in default-scheduler's %v", point, p.Name, p.Weight, sets[1].Enabled)
			}
		}
	}
	for name, plugins := range got {
		if i := slices.Index(plugins.Score.Enabled, config.Plugin{Name: qgpu.Name, Weight: 10}); i < 0 {
			t.Errorf("%s: score plugins %v, want %s at weight 10", name, plugins.Score.Enabled, qgpu.Name)
		}
	}
	shipped := buildProfiles(t, filepath.Join(dir, "qgpu-scheduler.yaml"))["qgpu-scheduler"]
	if diff := cmp.Diff(shipped, got["qgpu-scheduler"]); diff != "" {
		t.Errorf("the qgpu-scheduler profile differs from config/qgpu-scheduler.yaml's (-shipped +as-default):\n%s", diff)
	}
}

// buildProfiles sets the scheduler up from a profile file (leader election
// off, a kubeconfig to a server that is never contacted) and returns the
// plugins each of its profiles runs, per extension point, in order.
func buildProfiles(t *testing.T, profile string) map[string]*config.Plugins {
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
	opts := options.NewOptions()
	opts.ConfigFile = writeConfig(t, string(out))
	opts.SecureServing.BindPort = 0
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, sched, err := app.Setup(ctx, opts, Options()...)
	if err != nil {
		t.Fatalf("setting the scheduler up from %s: %v", profile, err)
	}
	plugins := map[string]*config.Plugins{}
	for name, fw := range sched.Profiles {
		plugins[name] = fw.ListPlugins()
	}
	return plugins
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
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
