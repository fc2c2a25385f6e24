package main

import (
	"context"
	"errors"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/test/fakeactivity"
)

// activity is the --fake-activity-file sidecar.
type activity struct {
	file string
}

func (a *activity) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&a.file, "fake-activity-file", "", "with --fake-cards: simulate a process and a cgroup for every granted pod under --cgroup-root and --proc-root (scratch directories), busy or idle as this file says, one \"<namespace>/<pod> busy|idle\" a line (test/fakeactivity)")
}

// sidecar returns the simulation of --fake-activity-file (nil without it).
// It needs fake cards and scratch cgroup and proc roots: it writes there.
func (a *activity) sidecar(cfg *agent.Config) (agent.Sidecar, error) {
	if a.file == "" {
		return nil, nil
	}
	fake, ok := cfg.NVML.(*nvml.Fake)
	if !ok || cfg.ProcRoot == "" {
		return nil, errors.New("--fake-activity-file needs --fake-cards, and --cgroup-root and --proc-root pointing at scratch directories")
	}
	if err := fakeactivity.CheckRoots(cfg.CgroupRoot, cfg.ProcRoot); err != nil {
		return nil, err
	}
	cgroupRoot, procRoot, file := cfg.CgroupRoot, cfg.ProcRoot, a.file
	// Started before the priority controller (agent.Sidecar): the first
	// sync creates the fake cgroup tree the controller's freezer looks for.
	return func(ctx context.Context, node agent.NodeState) error {
		sim, err := fakeactivity.New(fake, cgroupRoot, procRoot, file, node.Grants)
		if err != nil {
			return err
		}
		sim.Pods = node.Pods
		if err := sim.Sync(klog.FromContext(ctx)); err != nil {
			klog.FromContext(ctx).Error(err, "Fake activity: first sync")
		}
		go sim.Run(ctx)
		return nil
	}, nil
}
