package agent

// The DRA mode (--kubelet-api=dra, docs/dra.md): the agent serves the
// kubelet as a DRA kubelet plugin (agent/dra) instead of device plugins,
// and prepares claims with the node's enforcement backend.

import (
	"context"
	"fmt"
	"net"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/allocate"
	"github.com/qgpu-scheduler/qgpu/agent/cardbudget"
	"github.com/qgpu-scheduler/qgpu/agent/dra"
	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/nodeconfig"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/agent/pods"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// How the agent serves the kubelet (--kubelet-api).
const (
	KubeletAPIDevicePlugins = "device-plugins"
	KubeletAPIDRA           = "dra"
)

// draMode reports whether the agent runs as a DRA kubelet plugin.
func (c *Config) draMode() bool { return c.KubeletAPI == KubeletAPIDRA }

// validateDRA checks the DRA mode's flags.
func (c *Config) validateDRA() []error {
	switch c.KubeletAPI {
	case "", KubeletAPIDevicePlugins:
		return nil
	case KubeletAPIDRA:
	default:
		return []error{fmt.Errorf("--kubelet-api %q: must be %s or %s", c.KubeletAPI, KubeletAPIDevicePlugins, KubeletAPIDRA)}
	}
	var errs []error
	for _, f := range []struct{ flag, v string }{
		{"--kubelet-plugins-dir", c.KubeletPluginsDir}, {"--kubelet-registry-dir", c.KubeletRegistryDir}, {"--cdi-spec-dir", c.CDISpecDir},
	} {
		if !filepath.IsAbs(f.v) {
			errs = append(errs, fmt.Errorf("%s %q: must be an absolute path (--kubelet-api=dra)", f.flag, f.v))
		}
	}
	return errs
}

// claimDriver is the driver that prepares the node's claims, its checkpoint
// loaded and the claims gone since cleaned up; errors it cannot recover
// from go to fatal.
func (a *agent) claimDriver(ctx context.Context, driver *nvml.Driver, nodeCfg *nodeconfig.Config, specs *enforce.CDISpecs, podSource allocate.PodSource, fatal chan<- error) (*dra.Driver, error) {
	claims, err := dra.NewDriver(a.cfg.NodeName, dra.DriverConfig{
		Cards: a.tracker.Cards, Grantable: a.grantable(driver), Backend: nodeCfg.Current, CDI: specs,
		DeviceGrants: deviceGrants(a.store.List, podSource),
		Checkpoint:   dra.Checkpoint{Path: a.cfg.checkpointPath()},
		Fatal: func(err error) {
			select {
			case fatal <- err:
			default:
			}
		}})
	if err != nil {
		return nil, err
	}
	if err := claims.CleanupStale(ctx, a.cfg.Client); err != nil {
		klog.FromContext(ctx).Error(err, "Cleaning up the prepared claims that no longer exist; the next start tries again")
	}
	return claims, nil
}

// deviceGrants is dra.DriverConfig.DeviceGrants: the store's grants of
// the node's pods that have not terminated. A node switched from the
// device plugins to DRA keeps their store, and the pods they granted hold
// their cards until they end; one with no grant lists no pod.
func deviceGrants(list func() ([]store.Grant, error), pods allocate.PodSource) func(context.Context, bool) ([]store.Grant, error) {
	return func(ctx context.Context, fresh bool) ([]store.Grant, error) {
		grants, err := list()
		if err != nil || len(grants) == 0 {
			return nil, err
		}
		var bound []*v1.Pod
		if fresh {
			bound, err = pods.Fresh(ctx)
		} else {
			bound, err = pods.Cached()
		}
		if err != nil {
			return nil, fmt.Errorf("listing the node's pods: %w", err)
		}
		live := cardbudget.LivePods(bound)
		var out []store.Grant
		for _, g := range grants {
			if live[g.PodUID] {
				out = append(out, g)
			}
		}
		return out, nil
	}
}

// checkpointPath is --dra-checkpoint, else the driver's directory's.
func (c *Config) checkpointPath() string {
	if c.DRACheckpoint != "" {
		return c.DRACheckpoint
	}
	return filepath.Join(dra.DriverDir(c.KubeletPluginsDir), dra.DefaultCheckpointName)
}

// runDRA is run for the DRA mode, once the inventory is published (the
// scheduler's ledger counts the claimed slices on it; the node offers no
// qGPU extended resource, so pods of the device-plugin path do not fit
// here: docs/dra.md): the pods informer, the node's backend answering undelivered (the claims'
// CDI specs deliver it), the kubelet plugin and its read-back, and beside
// the pods the priority controller and HAMi-core upkeep, which learn the
// claims' containers from the prepared claims, and the MPS guard.
func (a *agent) runDRA(ctx context.Context, driver *nvml.Driver, metricsAddr net.Addr) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go a.publisher.Run(ctx)
	podSource := pods.New(a.cfg.Client, a.cfg.NodeName)
	if err := podSource.Start(ctx); err != nil {
		return err
	}
	specs, err := a.cdiSpecs()
	if err != nil {
		return err
	}
	nodeCfg, err := a.enforcement(ctx, nil)
	if err != nil {
		return err
	}
	fatal := make(chan error, 1)
	claims, err := a.claimDriver(ctx, driver, nodeCfg, specs, podSource, fatal)
	if err != nil {
		return err
	}
	plugin, err := dra.StartPlugin(ctx, dra.PluginConfig{Node: a.cfg.NodeName, Client: a.cfg.Client,
		PluginsDir: a.cfg.KubeletPluginsDir, RegistryDir: a.cfg.KubeletRegistryDir, Cards: a.tracker.Cards,
		Recorder: a.recorder, Metric: a.metrics.SetDRAConsumableCapacity}, claims)
	if err != nil {
		return fmt.Errorf("starting the DRA kubelet plugin: %w", err)
	}
	defer plugin.Stop()
	a.probes.DRAStarted(plugin)
	go plugin.Run(ctx)
	conditions := a.healthConditions(podSource, func(list []*v1.Pod) ([]store.Grant, error) {
		return a.withGrants(func() ([]store.Grant, error) { return dra.PodGrants(claims.Prepared(), list), nil })
	})
	devices := &dra.DeviceStatus{Client: a.cfg.Client, Node: a.cfg.NodeName, Prepared: claims.Prepared, Cards: a.tracker.Cards, Why: a.tracker.Why}
	conditions.Also = devices.Sync
	go conditions.Run(ctx, a.cfg.ReconcileInterval)
	a.tracker.Subscribe(func([]protocol.Card) {
		plugin.Publish()
		claims.HealthChanged()
		a.publisher.Trigger()
		a.refreshMetrics()
		conditions.Trigger()
	})
	go driver.WatchHealth(ctx, a.cfg.HealthInterval, a.onHealth(ctx))

	// Beside the pods, with the claims' containers as grants.
	a.startSidecars(ctx, podSource)
	defer a.startPriorityWith(ctx, nodeCfg, podSource, func() ([]store.Grant, error) {
		return a.withGrants(func() ([]store.Grant, error) {
			list, err := podSource.Cached()
			return dra.PodGrants(claims.Prepared(), list), err
		})
	})()
	a.startHAMiUpkeepWith(ctx, nodeCfg, podSource, func() ([]store.Grant, error) {
		return a.withGrants(func() ([]store.Grant, error) { return dra.ClaimGrants(claims.Prepared()), nil })
	})
	// A process on an MPS-shared card that is not a client of its server
	// bypasses MPS whichever API prepared the card's clients.
	a.startMPSGuard(ctx, driver, nodeCfg, podSource)
	a.refreshMetrics()
	klog.FromContext(ctx).Info("Serving the kubelet as DRA driver", "driver", protocol.DRADriver, "checkpoint", a.cfg.checkpointPath())
	if a.cfg.Started != nil {
		a.cfg.Started(metricsAddr)
	}
	select {
	case <-ctx.Done():
		klog.FromContext(ctx).Info("Shutting down")
		return nil
	case err := <-fatal:
		return err
	}
}

// withGrants is the store's grants and more's.
func (a *agent) withGrants(more func() ([]store.Grant, error)) ([]store.Grant, error) {
	grants, err := a.store.List()
	if err != nil {
		return nil, err
	}
	extra, err := more()
	return append(grants, extra...), err
}
