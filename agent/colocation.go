package agent

// The parts that run beside the pods: device delivery and its CDI sweep, the online/offline
// priority controller with its suspension writer, HAMi-core upkeep and the
// sidecars a test build adds.

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/cardspec"
	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/hamicore"
	"github.com/qgpu-scheduler/qgpu/agent/nodeconfig"
	"github.com/qgpu-scheduler/qgpu/agent/priority"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/agent/suspension"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// delivery is the --device-list-strategy the backends answer through.
func (a *agent) delivery() (*enforce.Delivery, error) {
	strategy := enforce.StrategyEnvvar
	if a.cfg.DeviceListStrategy != "" {
		strategy = enforce.Strategy(a.cfg.DeviceListStrategy)
	}
	var specs *enforce.CDISpecs
	if strategy.CDI() {
		var err error
		if specs, err = a.cdiSpecs(); err != nil {
			return nil, err
		}
	}
	return enforce.NewDelivery(strategy, specs)
}

// cdiSpecs writes the agent's card spec (--cdi-card-kind) and opens the
// CDI spec directories: the agent's own and the node's, where the cards'
// devices are looked up.
func (a *agent) cdiSpecs() (*enforce.CDISpecs, error) {
	nodeDirs, kinds := a.cfg.CDINodeSpecDirs, enforce.DefaultCDICardKinds
	if a.writeCardSpec() {
		kinds = append([]string{a.cfg.CardSpec.Kind}, kinds...)
		if !slices.Contains(nodeDirs, a.cfg.CDISpecDir) {
			nodeDirs = append(slices.Clone(nodeDirs), a.cfg.CDISpecDir)
		}
	}
	return enforce.NewCDISpecs(a.cfg.CDISpecDir, nodeDirs, kinds...)
}

// writeCardSpec writes the agent's per-card CDI spec (agent/cardspec) and
// says whether its kind is to be looked up. A spec that cannot be written
// is not fatal: the old one is removed (its index names may be another
// card's by now) and the cards are looked up in NVIDIA's specs, where an
// Allocate that finds none says so.
func (a *agent) writeCardSpec() bool {
	o := a.cfg.CardSpec
	if o.Kind == "" {
		return false
	}
	o.Dir, o.NVML = a.cfg.CDISpecDir, a.cfg.NVML
	res, err := cardspec.Write(o)
	if err != nil {
		klog.Background().Error(err, "Writing the agent's card CDI spec; the cards are looked up in NVIDIA's specs only", "kind", o.Kind)
		if rmErr := cardspec.Remove(o); rmErr != nil {
			klog.Background().Error(rmErr, "Removing the old card CDI spec")
		}
		return false
	}
	klog.Background().Info("Wrote the card CDI spec", "path", res.Path, "devices", res.Devices)
	return true
}

// startCDISweep removes, every minute, the CDI specs of containers whose
// pod is neither on the node nor holding a grant (the reconciler has
// released it), once they are five minutes old: Allocate writes a spec
// before the grant is stored.
func (a *agent) startCDISweep(ctx context.Context, d *enforce.Delivery, nodePods cachedPods) {
	if d.CDI == nil {
		return
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		keep, err := a.knownPods(nodePods)
		if err == nil {
			var removed int
			removed, err = d.CDI.Sweep(keep, 5*time.Minute, time.Now(), 256)
			if removed > 0 {
				klog.FromContext(ctx).V(2).Info("Removed CDI specs of released containers", "removed", removed)
			}
		}
		if err != nil {
			klog.FromContext(ctx).Error(err, "Sweeping CDI specs")
		}
	}, time.Minute)
}

// knownPods is the set of pod UIDs on the node or in a grant; an error of
// either list keeps everything.
func (a *agent) knownPods(nodePods cachedPods) (map[string]bool, error) {
	pods, err := nodePods.Cached()
	if err != nil {
		return nil, err
	}
	grants, err := a.store.List()
	if err != nil {
		return nil, err
	}
	keep := map[string]bool{}
	for _, p := range pods {
		keep[string(p.UID)] = true
	}
	for _, g := range grants {
		keep[g.PodUID] = true
	}
	return keep, nil
}

// startPriority runs the online/offline controller (agent/priority) if it is
// enabled and the cgroup root has a freezer, with the writer of the pods'
// qgpu.io/suspended annotations. The returned function stops it, waits
// until it has thawed every offline pod it froze, and writes the last
// annotations.
func (a *agent) startPriority(ctx context.Context, nodeCfg *nodeconfig.Config, nodePods cachedPods) (stop func()) {
	return a.startPriorityWith(ctx, nodeCfg, nodePods, a.store.List)
}

// startPriorityWith is startPriority reading the containers' grants from grants.
func (a *agent) startPriorityWith(ctx context.Context, nodeCfg *nodeconfig.Config, nodePods cachedPods, grants func() ([]store.Grant, error)) (stop func()) {
	if !a.cfg.PriorityController {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	ctrl, marks, err := a.newPriority(nodeCfg, nodePods, grants)
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

func (a *agent) newPriority(nodeCfg *nodeconfig.Config, nodePods cachedPods, grants func() ([]store.Grant, error)) (*priority.Controller, *suspension.Writer, error) {
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
		Poll: a.cfg.PriorityPoll, Idle: a.cfg.PriorityIdle, Grants: grants,
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
	a.startHAMiUpkeepWith(ctx, nodeCfg, nodePods, a.store.List)
}

// startHAMiUpkeepWith is startHAMiUpkeep reading the containers' grants from grants.
func (a *agent) startHAMiUpkeepWith(ctx context.Context, nodeCfg *nodeconfig.Config, nodePods cachedPods, grants func() ([]store.Grant, error)) {
	if a.cfg.HAMiRegionRoot == "" {
		return
	}
	procRoot := a.cfg.ProcRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	k, err := hamicore.New(hamicore.Config{Root: a.cfg.HAMiRegionRoot, Grants: grants, Pods: nodePods.Cached,
		Policy:   func() protocol.Policy { _, p, _ := nodeCfg.Current(); return p },
		ProcRoot: filepath.Clean(procRoot)})
	if err != nil {
		klog.FromContext(ctx).Error(err, "HAMi-core upkeep off")
		return
	}
	go k.Run(ctx)
	a.metrics.SetUsageSource(k.Usage)
}
