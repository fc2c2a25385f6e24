package agent

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/fakeactivity"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
)

// startFakeActivity runs the simulated pod processes and cgroups of
// --fake-activity-file (fake cards only; Validate checked), until ctx ends.
// It creates the fake cgroup tree before returning, so that the priority
// controller finds its freezer.
func (a *agent) startFakeActivity(ctx context.Context, nodePods cachedPods) error {
	if a.cfg.FakeActivityFile == "" {
		return nil
	}
	fake, _ := a.cfg.NVML.(*nvml.Fake)
	sim, err := fakeactivity.New(fake, a.cfg.CgroupRoot, a.cfg.ProcRoot, a.cfg.FakeActivityFile, a.store.List)
	if err != nil {
		return err
	}
	sim.Pods = nodePods.Cached
	if err := sim.Sync(klog.FromContext(ctx)); err != nil {
		klog.FromContext(ctx).Error(err, "Fake activity: first sync")
	}
	go sim.Run(ctx)
	return nil
}
