// Package agent wires the qgpu-agent together: store, card discovery,
// inventory, device plugins, health, reconcile and metrics (docs/design.md).
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/allocate"
	"github.com/qgpu-scheduler/qgpu/agent/deviceplugin"
	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/fakeactivity"
	"github.com/qgpu-scheduler/qgpu/agent/inventory"
	"github.com/qgpu-scheduler/qgpu/agent/metrics"
	"github.com/qgpu-scheduler/qgpu/agent/nodeconfig"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/agent/podresources"
	"github.com/qgpu-scheduler/qgpu/agent/pods"
	"github.com/qgpu-scheduler/qgpu/agent/reconcile"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Config is everything the agent needs; cmd/qgpu-agent fills it from flags.
type Config struct {
	NodeName        string
	Client          kubernetes.Interface
	NVML            gonvml.Interface
	DBFile          string
	DevicePluginDir string
	// DeviceRoot is the host directory with the cards' device nodes, passed
	// into containers by Allocate ("" passes none).
	DeviceRoot         string
	PodResourcesSocket string // "" skips the kubelet comparison
	Backend            string
	HAMiLibDir         string
	HAMiLibName        string // "": the newest libvgpu.so.<version> in HAMiLibDir
	HAMiLockDir        string
	MPSRoot            string
	MPSControlBin      string // "" : the agent runs no MPS control daemons
	MetricsAddr        string // "" disables metrics and the health probes
	HealthInterval     time.Duration
	ReconcileInterval  time.Duration
	// The online/offline priority controller (agent/priority).
	PriorityController         bool
	PriorityPoll, PriorityIdle time.Duration // 0: the controller's defaults
	CgroupRoot                 string
	ProcRoot                   string // "" is /proc
	// KubeletCgroupRoot and KubeletCgroupDriver say where the kubelet puts
	// pod cgroups (its --cgroup-root, --cgroup-driver); KubeletConfig, if
	// set, is read for both instead (agent/cgroup).
	KubeletCgroupRoot, KubeletCgroupDriver, KubeletConfig string
	// HAMiRegionRoot is the host directory of HAMi-core's per-container
	// shared regions (<pod UID>_<container>/cudevshr.cache), which the
	// hami-core backend creates; "" leaves suspension to the freezer
	// (agent/priority, agent/hamiregion) and the hami-core backend refuses.
	HAMiRegionRoot string
	// FakeActivityFile, with fake cards only (NVML is an *nvml.Fake),
	// simulates the granted pods' processes and cgroups under CgroupRoot
	// and ProcRoot, busy or idle as the file says (agent/fakeactivity).
	FakeActivityFile string
	// Started, if set, is called once everything runs, with the metrics address.
	Started func(metricsAddr net.Addr)
	// Vocabularies are served on every node besides those its labels enable (vocabularies.go).
	Vocabularies []string
}

// Validate checks the configuration before anything starts.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name is required (--node-name or $NODE_NAME)"))
	}
	if c.Client == nil || c.NVML == nil {
		errs = append(errs, errors.New("a client and an NVML interface are required"))
	}
	if !known(c.Backend) {
		errs = append(errs, fmt.Errorf("--backend %q: must be one of %v", c.Backend, enforce.Names))
	}
	if c.DBFile == "" || c.DevicePluginDir == "" {
		errs = append(errs, errors.New("--dbfile and --device-plugin-dir are required"))
	}
	if c.HealthInterval <= 0 || c.ReconcileInterval <= 0 {
		errs = append(errs, errors.New("health and reconcile intervals must be positive"))
	}
	if c.FakeActivityFile != "" {
		if _, fake := c.NVML.(*nvml.Fake); !fake || c.ProcRoot == "" {
			errs = append(errs, errors.New("--fake-activity-file needs --fake-cards, and --cgroup-root and --proc-root pointing at scratch directories"))
		} else if err := fakeactivity.CheckRoots(c.CgroupRoot, c.ProcRoot); err != nil {
			errs = append(errs, err)
		}
	}
	if c.PriorityPoll < 0 || c.PriorityIdle < 0 {
		errs = append(errs, errors.New("--priority-poll and --priority-idle must not be negative"))
	}
	errs = append(errs, validateVocabularies(c.Vocabularies)...)
	return errors.Join(errs...)
}

func known(backend string) bool {
	for _, n := range enforce.Names {
		if n == backend {
			return true
		}
	}
	return false
}

// Run runs the agent until ctx ends, then shuts down cleanly: servers
// stopped, sockets removed, store closed. Start-up order: store, cards,
// inventory, informers, device plugins, health, reconcile.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
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
	logger.Info("Discovered cards", "node", cfg.NodeName, "cards", len(driver.Cards()))
	a := &agent{cfg: cfg, store: st, tracker: tracker, metrics: metrics.New(), probes: &probes{store: st, tracker: tracker}}
	// The probes answer from here on: while the agent waits for its Node or
	// the API server, liveness passes and readiness says what is missing.
	var metricsAddr net.Addr
	if cfg.MetricsAddr != "" {
		if metricsAddr, err = a.metrics.Serve(ctx, cfg.MetricsAddr, a.probes.handlers()); err != nil {
			return err
		}
	}
	if err := publishWhenRegistered(ctx, cfg, tracker, a.probes.onPublished); err != nil {
		return err
	}
	recorder, stopEvents := newRecorder(cfg.Client, cfg.NodeName)
	defer stopEvents()
	a.recorder = recorder
	return a.run(ctx, driver, metricsAddr)
}

// publishWhenRegistered publishes the inventory, waiting while the Node does
// not exist yet: the kubelet registers it asynchronously, so an agent that
// starts with the kubelet (the hollow node, a static pod, a node that
// re-registers) would otherwise exit before its node is there.
func publishWhenRegistered(ctx context.Context, cfg Config, tracker *inventory.Tracker, published func(*protocol.Inventory)) error {
	logged := false
	return wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		inv := tracker.Inventory()
		err := inventory.Publish(ctx, cfg.Client, cfg.NodeName, inv)
		if apierrors.IsNotFound(err) {
			if !logged {
				klog.FromContext(ctx).Info("Waiting for the Node to be registered", "node", cfg.NodeName)
				logged = true
			}
			return false, nil
		}
		if err == nil {
			published(inv)
		}
		return err == nil, err
	})
}

type agent struct {
	cfg      Config
	store    *store.Store
	tracker  *inventory.Tracker
	recorder record.EventRecorder
	metrics  *metrics.Metrics
	plugins  *deviceplugin.Manager
	probes   *probes
}

func (a *agent) run(ctx context.Context, driver *nvml.Driver, metricsAddr net.Addr) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	podSource := pods.New(a.cfg.Client, a.cfg.NodeName)
	if err := podSource.Start(ctx); err != nil {
		return err
	}
	mps := a.mpsDaemons(ctx)
	nodeCfg := &nodeconfig.Config{Node: a.cfg.NodeName, DefaultBackend: a.cfg.Backend, Recorder: a.recorder,
		Options: enforce.Options{MPSRoot: a.cfg.MPSRoot, HAMi: enforce.HAMiOptions{LibDir: a.cfg.HAMiLibDir,
			LibName: a.cfg.HAMiLibName, RegionRoot: a.cfg.HAMiRegionRoot, LockDir: a.cfg.HAMiLockDir}}}
	if mps != nil {
		nodeCfg.Options.MPS = mps
		defer mps.Stop()
	}
	if err := nodeCfg.Watch(ctx, a.cfg.Client); err != nil {
		return err
	}
	if b, policy, err := nodeCfg.Current(); err != nil {
		// Not fatal: every Allocate reports it, and fixing the node fixes the agent.
		klog.FromContext(ctx).Error(err, "Enforcement backend unusable; Allocate will refuse until it is fixed")
	} else {
		klog.FromContext(ctx).Info("Enforcement", "backend", b.Name(), "policy", policy)
		a.startMPS(ctx, mps, b)
	}
	grants := newGrantWriter(a.cfg.Client)
	go grants.run(ctx)
	alloc := &allocate.Allocator{Node: a.cfg.NodeName, Store: a.store, Pods: podSource,
		Config: nodeCfg.Current, OnPodGranted: grants.enqueue, Cards: a.tracker.Cards, Recorder: a.recorder}
	if a.cfg.DeviceRoot != "" {
		alloc.Devices = &enforce.DeviceNodes{Root: a.cfg.DeviceRoot, Minor: driver.Minor}
	}
	if a.cfg.PodResourcesSocket != "" {
		alloc.Kubelet = podresources.Client{Socket: a.cfg.PodResourcesSocket}
	}
	a.plugins = deviceplugin.NewManager(a.cfg.DevicePluginDir, a.tracker.Cards(), &observed{alloc: alloc, agent: a})
	a.plugins.AddVocabularies(a.vocabularies(ctx), a.tracker.Cards(), &observed{alloc: alloc, agent: a})
	defer a.plugins.Stop()
	a.probes.plugins.Store(a.plugins)
	publish := newPublisher(a.cfg.Client, a.cfg.NodeName, a.tracker)
	publish.published = a.probes.onPublished
	go publish.run(ctx)
	a.tracker.Subscribe(func(cards []protocol.Card) {
		a.plugins.UpdateCards(cards)
		publish.trigger()
		a.refreshMetrics()
	})
	go driver.WatchHealth(ctx, a.cfg.HealthInterval, a.onHealth(ctx))
	pluginErr := make(chan error, 1)
	go func() { pluginErr <- a.plugins.Run(ctx, true) }()
	go a.reconciler(podSource).Run(ctx, a.cfg.ReconcileInterval)
	defer a.startPriority(ctx, nodeCfg, podSource)()
	a.startHAMiUpkeep(ctx, nodeCfg, podSource)
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

func (a *agent) reconciler(podSource allocate.PodSource) *reconcile.Reconciler {
	rec := &reconcile.Reconciler{Node: a.cfg.NodeName, Client: a.cfg.Client, Store: a.store, Pods: podSource,
		Recorder: a.recorder, OnChange: a.refreshMetrics}
	if a.cfg.PodResourcesSocket != "" {
		rec.PodResources = podresources.Client{Socket: a.cfg.PodResourcesSocket}
	}
	return rec
}

func (a *agent) onHealth(ctx context.Context) func(nvml.HealthEvent) {
	return func(e nvml.HealthEvent) {
		klog.FromContext(ctx).Info("Card health changed", "index", e.Index, "uuid", e.UUID, "healthy", e.Healthy, "reason", e.Reason)
		a.tracker.SetHealth(e.UUID, e.Healthy)
	}
}

func (a *agent) refreshMetrics() {
	grants, err := a.store.List()
	if err != nil {
		return
	}
	a.metrics.Update(a.tracker.Cards(), grants)
}

func newRecorder(client kubernetes.Interface, node string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "qgpu-agent", Host: node}), b.Shutdown
}
