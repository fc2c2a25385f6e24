package agent

import (
	"context"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/nodeconfig"
	"github.com/qgpu-scheduler/qgpu/agent/priority"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// mpsDaemons returns the supervisor of the per-card MPS control daemons, or
// nil when --mps-control-bin is empty (an operator runs them). Nothing starts
// until the mps backend is selected (startMPS, or the first mps Allocate).
func (a *agent) mpsDaemons(ctx context.Context) *enforce.MPSDaemons {
	if a.cfg.MPSControlBin == "" {
		return nil
	}
	return enforce.NewMPSDaemons(a.cfg.MPSRoot, a.cfg.MPSControlBin, klog.FromContext(ctx).WithName("mps"))
}

// startMPS starts the daemons of all cards when the node's backend is mps.
func (a *agent) startMPS(ctx context.Context, d *enforce.MPSDaemons, backend enforce.Backend) {
	if d == nil || backend == nil || backend.Name() != enforce.NameMPS {
		return
	}
	var uuids []string
	for _, c := range a.tracker.Cards() {
		uuids = append(uuids, c.UUID)
	}
	if err := d.Start(uuids); err != nil {
		klog.FromContext(ctx).Error(err, "Starting MPS control daemons; mps Allocate calls retry")
	}
}

// startPriority runs the online/offline controller (agent/priority) if it is
// enabled and the cgroup root has a freezer. The returned function stops it
// and waits until it has thawed every offline pod it froze.
func (a *agent) startPriority(ctx context.Context, nodeCfg *nodeconfig.Config) (stop func()) {
	logger := klog.FromContext(ctx)
	if !a.cfg.PriorityController {
		return func() {}
	}
	freezer, err := cgroup.Detect(a.cfg.CgroupRoot)
	if err != nil {
		logger.Error(err, "Priority controller off: online pods will not preempt offline ones")
		return func() {}
	}
	devices, err := priority.DevicesByUUID(a.cfg.NVML)
	if err != nil {
		logger.Error(err, "Priority controller off: listing NVML devices")
		return func() {}
	}
	procRoot := a.cfg.ProcRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	ctrl, err := priority.New(priority.Config{
		Poll: a.cfg.PriorityPoll, Idle: a.cfg.PriorityIdle, Grants: a.store.List,
		Policy:  func() protocol.Policy { _, p, _ := nodeCfg.Current(); return p },
		Devices: devices, Freezer: freezer, Procs: cgroup.Procs{Root: filepath.Clean(procRoot)},
		Recorder: a.recorder, Observer: a.metrics.Priority,
	})
	if err != nil {
		logger.Error(err, "Priority controller off")
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ctrl.Run(ctx); err != nil {
			logger.Error(err, "Priority controller stopped")
		}
	}()
	return func() { cancel(); <-done }
}
