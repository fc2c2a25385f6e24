package agent

// The parts that run beside the pods: MPS control daemons, the online/offline
// priority controller with its suspension writer, HAMi-core upkeep and the
// sidecars a test build adds.

import (
	"context"
	"fmt"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/hamicore"
	"github.com/qgpu-scheduler/qgpu/agent/nodeconfig"
	"github.com/qgpu-scheduler/qgpu/agent/priority"
	"github.com/qgpu-scheduler/qgpu/agent/suspension"
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
// enabled and the cgroup root has a freezer, with the writer of the pods'
// qgpu.io/suspended annotations. The returned function stops it, waits
// until it has thawed every offline pod it froze, and writes the last
// annotations.
func (a *agent) startPriority(ctx context.Context, nodeCfg *nodeconfig.Config, nodePods cachedPods) (stop func()) {
	if !a.cfg.PriorityController {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	ctrl, marks, err := a.newPriority(nodeCfg, nodePods)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Priority controller off: online pods will not preempt offline ones")
		return cancel
	}
	if pods, err := nodePods.Cached(); err == nil {
		marks.ClearStale(pods)
	}
	ctrlDone, marksDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(marksDone)
		marks.Run(ctx, ctrlDone)
	}()
	go func() {
		defer close(ctrlDone)
		if err := ctrl.Run(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Priority controller stopped")
		}
	}()
	return func() { cancel(); <-ctrlDone; <-marksDone }
}

// cachedPods lists the node's pods (pods.Source).
type cachedPods interface {
	Cached() ([]*v1.Pod, error)
}

// startSidecars starts the configured sidecars in order; one that fails is
// logged and left out.
func (a *agent) startSidecars(ctx context.Context, nodePods cachedPods) {
	node := NodeState{Grants: a.store.List, Pods: nodePods.Cached}
	for i, start := range a.cfg.Sidecars {
		if err := start(ctx, node); err != nil {
			klog.FromContext(ctx).Error(err, "Sidecar off", "sidecar", i)
		}
	}
}

func (a *agent) newPriority(nodeCfg *nodeconfig.Config, nodePods cachedPods) (*priority.Controller, *suspension.Writer, error) {
	freezer, err := cgroup.Detect(a.cfg.CgroupRoot)
	if err != nil {
		return nil, nil, err
	}
	kubelet := cgroup.Kubelet{CgroupRoot: a.cfg.KubeletCgroupRoot, Driver: a.cfg.KubeletCgroupDriver}
	if a.cfg.KubeletConfig != "" {
		if kubelet, err = cgroup.ReadKubeletConfig(a.cfg.KubeletConfig); err != nil {
			return nil, nil, err
		}
	}
	if err := kubelet.Validate(); err != nil {
		return nil, nil, err
	}
	freezer.Kubelet = kubelet
	devices, err := priority.DevicesByUUID(a.cfg.NVML)
	if err != nil {
		return nil, nil, fmt.Errorf("listing NVML devices: %w", err)
	}
	procRoot := a.cfg.ProcRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	marks := suspension.New(a.cfg.Client)
	ctrl, err := priority.New(priority.Config{
		Poll: a.cfg.PriorityPoll, Idle: a.cfg.PriorityIdle, Grants: a.store.List,
		Policy:  func() protocol.Policy { _, p, _ := nodeCfg.Current(); return p },
		Devices: devices, Freezer: freezer, Procs: cgroup.Procs{Root: filepath.Clean(procRoot)},
		Recorder: a.recorder, Observer: a.metrics.Priority, Reporter: marks,
		Pods: nodePods.Cached, ProcRoot: filepath.Clean(procRoot), RegionRoot: a.cfg.HAMiRegionRoot,
	})
	return ctrl, marks, err
}

// startHAMiUpkeep turns the burst-share switches of HAMi-core regions and
// removes the region directories of gone pods (agent/hamicore) while ctx
// runs; nothing without --hami-region-root.
func (a *agent) startHAMiUpkeep(ctx context.Context, nodeCfg *nodeconfig.Config, nodePods cachedPods) {
	if a.cfg.HAMiRegionRoot == "" {
		return
	}
	procRoot := a.cfg.ProcRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	k, err := hamicore.New(hamicore.Config{Root: a.cfg.HAMiRegionRoot, Grants: a.store.List, Pods: nodePods.Cached,
		Policy:   func() protocol.Policy { _, p, _ := nodeCfg.Current(); return p },
		ProcRoot: filepath.Clean(procRoot)})
	if err != nil {
		klog.FromContext(ctx).Error(err, "HAMi-core upkeep off")
		return
	}
	go k.Run(ctx)
}
