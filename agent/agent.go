// Package agent wires the qgpu-agent together (docs/design.md, the agent):
// it opens the store, finds the cards and starts each part in order. Every
// part is a package of its own; this one only connects them. The data path
// reads top to bottom in run: the kubelet's Allocate (agent/deviceplugin)
// goes to agent/allocate, which records the grant in agent/store and hands
// it to agent/grantwriter for the pod's qgpu.io/grant annotation.
package agent

import (
	"context"
	"net"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/agent/allocate"
	"github.com/qgpu-scheduler/qgpu/agent/cardhealth"
	"github.com/qgpu-scheduler/qgpu/agent/deviceplugin"
	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/grantwriter"
	"github.com/qgpu-scheduler/qgpu/agent/health"
	"github.com/qgpu-scheduler/qgpu/agent/inventory"
	"github.com/qgpu-scheduler/qgpu/agent/metrics"
	"github.com/qgpu-scheduler/qgpu/agent/nodeconfig"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/agent/podresources"
	"github.com/qgpu-scheduler/qgpu/agent/pods"
	"github.com/qgpu-scheduler/qgpu/agent/reconcile"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/agent/xgn"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Run runs the agent until ctx ends, then shuts down cleanly: servers
// stopped, sockets removed, store closed. Start-up order: store, cards,
// inventory, informers, device plugins, health, reconcile.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	st, err := store.Open(cfg.DBFile)
	if err != nil {
		return err
	}
	defer st.Close()
	driver, err := nvml.Open(cfg.NVML)
	if err != nil {
		return err
	}
	defer driver.Close()
	tracker := inventory.NewTracker(driver.Cards())
	klog.FromContext(ctx).Info("Discovered cards", "node", cfg.NodeName, "cards", len(driver.Cards()))
	a := &agent{cfg: cfg, store: st, tracker: tracker, metrics: metrics.New(), probes: health.NewProbes(st, tracker)}
	if cfg.draMode() {
		a.probes = health.NewDRAProbes(st)
	}
	// The probes answer from here on: while the agent waits for its Node or
	// the API server, liveness passes and readiness says what is missing.
	var metricsAddr net.Addr
	if cfg.MetricsAddr != "" {
		if metricsAddr, err = a.metrics.Serve(ctx, cfg.MetricsAddr, a.probes.Handlers()); err != nil {
			return err
		}
	}
	a.publisher = inventory.NewPublisher(cfg.Client, cfg.NodeName, tracker, a.probes.Published)
	if err := a.publisher.PublishWhenRegistered(ctx); err != nil {
		return err
	}
	recorder, stopEvents := newRecorder(cfg.Client, cfg.NodeName)
	defer stopEvents()
	a.recorder = recorder
	reportSkipped(ctx, recorder, cfg.NodeName, driver.Skipped())
	if cfg.draMode() {
		return a.runDRA(ctx, driver, metricsAddr)
	}
	return a.run(ctx, driver, metricsAddr)
}

// ReasonCardNotShared is the Warning Event on the Node for a card the agent
// does not advertise (MIG mode).
const ReasonCardNotShared = "QGPUCardNotShared"

// reportSkipped tells, in the log and on the Node, which cards are not
// advertised and why: the node's capacity is smaller than nvidia-smi shows.
func reportSkipped(ctx context.Context, recorder record.EventRecorder, node string, skipped []nvml.SkippedCard) {
	ref := &v1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)}
	for _, s := range skipped {
		klog.FromContext(ctx).Info("Card not advertised", "index", s.Index, "uuid", s.UUID, "reason", s.Reason)
		recorder.Eventf(ref, v1.EventTypeWarning, ReasonCardNotShared, "Card %d (%s) is not shared: %s", s.Index, s.UUID, s.Reason)
	}
}

type agent struct {
	cfg       Config
	store     *store.Store
	tracker   *inventory.Tracker
	recorder  record.EventRecorder
	metrics   *metrics.Metrics
	probes    *health.Probes
	publisher *inventory.Publisher
}

func (a *agent) run(ctx context.Context, driver *nvml.Driver, metricsAddr net.Addr) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	podSource := pods.New(a.cfg.Client, a.cfg.NodeName)
	if err := podSource.Start(ctx); err != nil {
		return err
	}
	delivery, err := a.delivery()
	if err != nil {
		return err
	}
	nodeCfg, err := a.enforcement(ctx, delivery)
	if err != nil {
		return err
	}

	// Allocate → store → grant annotation.
	grants := grantwriter.New(a.cfg.Client)
	go grants.Run(ctx)
	alloc := a.allocator(driver, podSource, nodeCfg, grants, delivery)
	plugins := deviceplugin.NewManager(a.cfg.DevicePluginDir, a.tracker.Cards(), &observed{alloc: alloc, agent: a})
	plugins.AddVocabularies(a.vocabularies(ctx), a.tracker.Cards(), &observed{alloc: alloc, agent: a})
	defer plugins.Stop()
	a.probes.PluginsStarted(plugins)

	// Card health → inventory, plugins' device lists, metrics, the
	// condition of the pods holding a slice of the card.
	go a.publisher.Run(ctx)
	conditions := a.healthConditions(podSource, func([]*v1.Pod) ([]store.Grant, error) { return a.store.List() })
	go conditions.Run(ctx, a.cfg.ReconcileInterval)
	a.tracker.Subscribe(func(cards []protocol.Card) {
		plugins.UpdateCards(cards)
		a.publisher.Trigger()
		a.refreshMetrics()
		conditions.Trigger()
	})
	go driver.WatchHealth(ctx, a.cfg.HealthInterval, a.onHealth(ctx))
	pluginErr := make(chan error, 1)
	go func() { pluginErr <- plugins.Run(ctx, true) }()
	go a.reconciler(podSource, alloc.Exclusive()).Run(ctx, a.cfg.ReconcileInterval)

	// Beside the pods: sidecars, online/offline priority, HAMi-core upkeep,
	// processes that bypass MPS.
	a.startSidecars(ctx, podSource)
	defer a.startPriority(ctx, nodeCfg, podSource)()
	a.startHAMiUpkeep(ctx, nodeCfg, podSource)
	a.startMPSGuard(ctx, driver, nodeCfg, podSource)
	a.startCDISweep(ctx, delivery, podSource)
	a.refreshMetrics()
	if a.cfg.Started != nil {
		a.cfg.Started(metricsAddr)
	}
	select {
	case <-ctx.Done():
		klog.FromContext(ctx).Info("Shutting down")
		return nil
	case err := <-pluginErr:
		return err
	}
}

// allocator answers the kubelet's Allocate calls: the assigned slice, only
// on a card that is healthy and not in MIG mode, recorded in the store and
// handed to the grant writer.
func (a *agent) allocator(driver *nvml.Driver, podSource allocate.PodSource, nodeCfg *nodeconfig.Config, grants *grantwriter.Writer, delivery *enforce.Delivery) *allocate.Allocator {
	alloc := &allocate.Allocator{Node: a.cfg.NodeName, Store: a.store, Pods: podSource,
		Config: nodeCfg.Current, OnPodGranted: grants.Enqueue, Cards: a.tracker.Cards, Recorder: a.recorder,
		Grantable: a.grantable(driver)}
	// Under CDI the cards' device nodes come from the node's NVIDIA spec.
	if a.cfg.DeviceRoot != "" && !delivery.Strategy.CDI() {
		alloc.Devices = &enforce.DeviceNodes{Root: a.cfg.DeviceRoot, Minor: driver.Minor}
	}
	if a.cfg.PodResourcesSocket != "" {
		alloc.Kubelet = podresources.Client{Socket: a.cfg.PodResourcesSocket}
	}
	return alloc
}

// grantable refuses a card that is unhealthy or in MIG mode now.
func (a *agent) grantable(driver *nvml.Driver) func(uuid string) error {
	return func(uuid string) error {
		if err := a.tracker.Grantable(uuid); err != nil {
			return err
		}
		return driver.Grantable(uuid)
	}
}

// enforcement watches the Node's policy and backend labels and keeps the
// xgn taint its node-alloc-mode label asks for (agent/xgn); the backends
// answer through delivery (--device-list-strategy; nil: undelivered, for
// the DRA mode, whose claims' CDI specs deliver them).
func (a *agent) enforcement(ctx context.Context, delivery *enforce.Delivery) (*nodeconfig.Config, error) {
	nodeCfg := &nodeconfig.Config{Node: a.cfg.NodeName, DefaultBackend: a.cfg.Backend, Recorder: a.recorder,
		Options: enforce.Options{MPSRoot: a.cfg.MPSRoot, Delivery: delivery, HAMi: enforce.HAMiOptions{LibDir: a.cfg.HAMiLibDir,
			LibName: a.cfg.HAMiLibName, RegionRoot: a.cfg.HAMiRegionRoot, LockDir: a.cfg.HAMiLockDir}}}
	if err := nodeCfg.Watch(ctx, a.cfg.Client); err != nil {
		return nil, err
	}
	if err := xgn.Keep(ctx, a.cfg.Client, a.cfg.NodeName); err != nil {
		return nil, err
	}
	if b, policy, err := nodeCfg.Current(); err != nil {
		// Not fatal: every Allocate reports it, and fixing the node fixes the agent.
		klog.FromContext(ctx).Error(err, "Enforcement backend unusable; Allocate will refuse until it is fixed")
	} else {
		how := "dra (a CDI spec per claim)"
		if delivery != nil {
			how = string(delivery.Strategy)
		}
		klog.FromContext(ctx).Info("Enforcement", "backend", b.Name(), "policy", policy, "deviceListStrategy", how)
	}
	return nodeCfg, nil
}

func (a *agent) reconciler(podSource allocate.PodSource, exclusive sync.Locker) *reconcile.Reconciler {
	rec := &reconcile.Reconciler{Node: a.cfg.NodeName, Client: a.cfg.Client, Store: a.store, Pods: podSource,
		Recorder: a.recorder, OnChange: a.refreshMetrics, Exclusive: exclusive}
	if a.cfg.PodResourcesSocket != "" {
		// A transient refusal (the kubelet's rate limit) is asked again; one
		// that lasts skips the comparison for this pass only.
		rec.PodResources = podresources.Retrying{Lister: podresources.Client{Socket: a.cfg.PodResourcesSocket}}
	}
	return rec
}

// healthConditions writes the condition qgpu.io/CardHealthy of the node's
// pods that hold a slice of a card (grants: the slices they hold).
func (a *agent) healthConditions(podSource *pods.Source, grants func([]*v1.Pod) ([]store.Grant, error)) *cardhealth.Reporter {
	return &cardhealth.Reporter{Client: a.cfg.Client, Pods: podSource.Cached, Grants: grants, Cards: a.tracker.Cards, Why: a.tracker.Why}
}

func (a *agent) onHealth(ctx context.Context) func(nvml.HealthEvent) {
	return func(e nvml.HealthEvent) {
		klog.FromContext(ctx).Info("Card health changed", "index", e.Index, "uuid", e.UUID, "healthy", e.Healthy, "reason", e.Reason)
		a.tracker.SetHealth(e.UUID, e.Healthy, e.Reason)
	}
}

func (a *agent) refreshMetrics() {
	grants, err := a.store.List()
	if err != nil {
		return
	}
	a.metrics.Update(a.tracker.Cards(), grants)
}

// observed counts Allocate outcomes and refreshes the gauges.
type observed struct {
	alloc *allocate.Allocator
	agent *agent
}

func (o *observed) Allocate(ctx context.Context, resource string, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	resp, err := o.alloc.Allocate(ctx, resource, ids)
	o.agent.metrics.ObserveAllocate(resource, err)
	if err == nil {
		o.agent.refreshMetrics()
	}
	return resp, err
}
