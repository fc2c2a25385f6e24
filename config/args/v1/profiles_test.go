package v1_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"

	"github.com/qgpu-scheduler/qgpu/config/args"
	_ "github.com/qgpu-scheduler/qgpu/config/args/v1"
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
)

// Every profile in config/ loads through kube-scheduler's own loader, passes
// its validation, and yields typed, defaulted QGPUArgs.
func TestProfilesLoad(t *testing.T) {
	tests := map[string]args.QGPUArgs{
		"qgpu-scheduler.yaml":        {NodePolicy: "fragfit", CardPolicy: "fragfit", VCUDAMemoryUnitMiB: 1},
		"qgpu-scheduler-spread.yaml": {NodePolicy: "spread", CardPolicy: "spread", VCUDAMemoryUnitMiB: 1},
		"qgpu-scheduler-gang.yaml":   {NodePolicy: "binpack", CardPolicy: "binpack", VCUDAMemoryUnitMiB: 1},
		// Both its profiles, default-scheduler and qgpu-scheduler.
		"qgpu-scheduler-as-default.yaml": {NodePolicy: "fragfit", CardPolicy: "fragfit", VCUDAMemoryUnitMiB: 1},
	}
	for file, want := range tests {
		t.Run(file, func(t *testing.T) {
			cfg, err := options.LoadConfigFromFile(klog.Background(), filepath.Join("..", "..", file))
			if err != nil {
				t.Fatal(err)
			}
			if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
				t.Fatalf("kube-scheduler rejects the profile: %v", err)
			}
			for i := range cfg.Profiles {
				got := qgpuArgs(t, &cfg.Profiles[i])
				if diff := cmp.Diff(want, *got); diff != "" {
					t.Fatalf("profile %s: %s", cfg.Profiles[i].SchedulerName, diff)
				}
				if errs := args.Validate(field.NewPath("args"), got); len(errs) > 0 {
					t.Fatal(errs)
				}
			}
		})
	}
}

func qgpuArgs(t *testing.T, prof *schedconfig.KubeSchedulerProfile) *args.QGPUArgs {
	t.Helper()
	for _, pc := range prof.PluginConfig {
		if pc.Name == "QGPU" {
			a, ok := pc.Args.(*args.QGPUArgs)
			if !ok {
				t.Fatalf("QGPU args decoded as %T, want *args.QGPUArgs", pc.Args)
			}
			return a
		}
	}
	t.Fatal("no QGPU plugin config")
	return nil
}

// Unset fields take their defaults; unknown fields are rejected by the strict decoder.
func TestArgsDefaultsAndStrictness(t *testing.T) {
	dir := t.TempDir()
	write := func(name, argsYAML string) string {
		p := filepath.Join(dir, name)
		body := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: false\n" +
			"profiles:\n- schedulerName: qgpu-scheduler\n  pluginConfig:\n  - name: QGPU\n    args:\n" + argsYAML
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := options.LoadConfigFromFile(klog.Background(), write("empty.yaml", "      {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(args.QGPUArgs{NodePolicy: "fragfit", CardPolicy: "fragfit", VCUDAMemoryUnitMiB: 1}, *qgpuArgs(t, &cfg.Profiles[0])); diff != "" {
		t.Fatal(diff)
	}
	_, err = options.LoadConfigFromFile(klog.Background(), write("typo.yaml", "      nodePolicyy: spread\n"))
	if err == nil || !strings.Contains(err.Error(), "nodePolicyy") {
		t.Fatalf("unknown field accepted: %v", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		args args.QGPUArgs
		want string
	}{
		{args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "spread", VCUDAMemoryUnitMiB: 1}, ""},
		{args.QGPUArgs{NodePolicy: "pack", CardPolicy: "spread", VCUDAMemoryUnitMiB: 1}, `args.nodePolicy: Unsupported value: "pack"`},
		{args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "", VCUDAMemoryUnitMiB: 1}, `args.cardPolicy: Unsupported value: ""`},
		{args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack", MaxPodsPerCard: -1, VCUDAMemoryUnitMiB: 1}, "args.maxPodsPerCard: Invalid value: -1"},
		{args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack", VCUDAMemoryUnitMiB: 256, Vocabularies: []string{"vcuda", "t9k", "hami"}}, ""},
		{args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack", VCUDAMemoryUnitMiB: 1, Vocabularies: []string{"volcano"}}, `args.vocabularies[0]: Unsupported value: "volcano"`},
		{args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack", VCUDAMemoryUnitMiB: 1, Vocabularies: []string{"t9k", "T9k"}}, `args.vocabularies[1]: Duplicate value: "T9k"`},
		{args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack", VCUDAMemoryUnitMiB: -1}, "args.vcudaMemoryUnitMiB: Invalid value: -1"},
		{args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack", VCUDAMemoryUnitMiB: 2048}, "args.vcudaMemoryUnitMiB: Invalid value: 2048"},
	}
	for _, tt := range tests {
		errs := args.Validate(field.NewPath("args"), &tt.args)
		got := errs.ToAggregate()
		switch {
		case tt.want == "" && got != nil:
			t.Errorf("%+v: unexpected %v", tt.args, got)
		case tt.want != "" && (got == nil || !strings.Contains(got.Error(), tt.want)):
			t.Errorf("%+v: got %v, want %q", tt.args, got, tt.want)
		}
	}
}
