package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"sigs.k8s.io/yaml"

	"github.com/qgpu-scheduler/qgpu/cmd/qgpu-scheduler/command"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// startScheduler runs kube-scheduler in-process with the plugins the binary
// registers, the qgpu-scheduler profile read from the repository and a stock
// profile beside it. It returns a channel closed when the scheduler ended.
func startScheduler(ctx context.Context, cp *harness.ControlPlane, profile string) (<-chan struct{}, error) {
	root, err := harness.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "qgpu-bench-*")
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(profile) {
		profile = filepath.Join(root, profile)
	}
	cfgPath, err := writeConfig(profile, kubeconfig, filepath.Join(dir, "config.yaml"))
	if err != nil {
		return nil, err
	}
	opts := options.NewOptions()
	opts.ConfigFile = cfgPath
	opts.SecureServing.BindPort = 0
	cc, sched, err := app.Setup(ctx, opts, command.Options()...)
	if err != nil {
		return nil, fmt.Errorf("setting up the scheduler: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer os.RemoveAll(dir)
		if err := app.Run(ctx, cc, sched); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "scheduler:", err)
		}
	}()
	return done, nil
}

// writeConfig is the profile file with leader election off, a fast client,
// and a stock profile (kube-scheduler's default plugins) added.
func writeConfig(profile, kubeconfig, out string) (string, error) {
	raw, err := os.ReadFile(profile)
	if err != nil {
		return "", err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return "", fmt.Errorf("%s: %w", profile, err)
	}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	cfg["clientConnection"] = map[string]any{"kubeconfig": kubeconfig, "qps": clientQPS, "burst": clientQPS}
	profiles, _ := cfg["profiles"].([]any)
	cfg["profiles"] = append(profiles, map[string]any{"schedulerName": stockScheduler})
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	return out, os.WriteFile(out, data, 0o600)
}
