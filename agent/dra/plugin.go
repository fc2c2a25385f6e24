package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Kubelet directories of the plugin, as the kubelet's plugin watcher and
// DRA manager expect them.
const (
	DefaultPluginsDir  = kubeletplugin.KubeletPluginsDir
	DefaultRegistryDir = kubeletplugin.KubeletRegistryDir
	// DefaultCheckpointName is the checkpoint's file in the driver's
	// directory under the plugins directory.
	DefaultCheckpointName = "checkpoint.json"
)

// Intervals of the read-back: often until the slice is read back whole,
// then now and then (an API server rolled back to the gate off drops the
// fields at the next write).
const (
	verifyFast = 2 * time.Second
	verifySlow = time.Minute
)

// PluginConfig says where the kubelet looks for the plugin and what it
// publishes.
type PluginConfig struct {
	Node   string
	Client kubernetes.Interface
	// PluginsDir is the kubelet's plugins directory; the driver's socket
	// is in PluginsDir/gpu.qgpu.io.
	PluginsDir string
	// RegistryDir is the kubelet's plugin registration directory.
	RegistryDir string
	// Cards are the node's cards, as the agent's inventory has them.
	Cards    func() []protocol.Card
	Recorder record.EventRecorder
	// Metric receives whether the consumable-capacity fields read back whole.
	Metric func(intact bool)
}

// DriverDir is the driver's own directory under pluginsDir (its socket,
// the checkpoint).
func DriverDir(pluginsDir string) string { return filepath.Join(pluginsDir, protocol.DRADriver) }

// Plugin is the running kubelet plugin: registration, the DRA service, the
// ResourceSlice publication and its read-back.
type Plugin struct {
	cfg    PluginConfig
	helper *kubeletplugin.Helper
	guard  *Guard

	mu sync.Mutex // serialises publications
}

// StartPlugin serves driver to the kubelet, registers it, and publishes
// the node's cards; Run keeps reading them back.
func StartPlugin(ctx context.Context, cfg PluginConfig, driver *Driver) (*Plugin, error) {
	if cfg.Node == "" || cfg.Client == nil || cfg.Cards == nil || cfg.Recorder == nil || cfg.Metric == nil {
		return nil, errors.New("dra: node, client, cards, recorder and metric are required")
	}
	// The kubelet creates its directories; the driver's own is the driver's to make.
	for _, dir := range []string{DriverDir(cfg.PluginsDir), cfg.RegistryDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("creating the DRA plugin's directory: %w", err)
		}
	}
	p := &Plugin{cfg: cfg}
	p.guard = NewGuard(cfg.Client, cfg.Node, cfg.Recorder, cfg.Metric, p.Publish)
	p.guard.Republish = p.Publish
	driver.cfg.DroppedFields = func(ctx context.Context, _ error) {
		// The controller's diff may be another feature's: the read-back decides.
		if err := p.guard.Verify(ctx, p.want()); err != nil {
			klog.FromContext(ctx).Error(err, "Reading the node's ResourceSlice back")
		}
	}
	helper, err := kubeletplugin.Start(ctx, driver,
		kubeletplugin.DriverName(protocol.DRADriver),
		kubeletplugin.KubeClient(cfg.Client),
		kubeletplugin.NodeName(cfg.Node),
		kubeletplugin.PluginDataDirectoryPath(DriverDir(cfg.PluginsDir)),
		kubeletplugin.RegistrarDirectoryPath(cfg.RegistryDir),
	)
	if err != nil {
		return nil, err
	}
	p.helper = helper
	if err := p.publish(ctx); err != nil {
		helper.Stop()
		return nil, err
	}
	return p, nil
}

// Publish publishes the node's pool again (after a health change, or to
// withdraw its devices).
func (p *Plugin) Publish() {
	if err := p.publish(context.Background()); err != nil {
		klog.Background().Error(err, "Publishing the node's ResourceSlice")
	}
}

func (p *Plugin) publish(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	res := Withdrawn(p.cfg.Node)
	if !p.guard.Withdrawn() {
		res = Shared(p.cfg.Node, p.cfg.Cards(), p.guard.Tainted())
	}
	return p.helper.PublishResources(ctx, res)
}

// want is what the node publishes while shared.
func (p *Plugin) want() []resourceapi.Device {
	return Shared(p.cfg.Node, p.cfg.Cards(), p.guard.Tainted()).Pools[p.cfg.Node].Slices[0].Devices
}

// Run reads the published devices back until ctx ends.
func (p *Plugin) Run(ctx context.Context) {
	p.guard.Run(ctx, p.want, verifyFast, verifySlow)
}

// Stop stops the servers and the publication; the published slices stay
// (the kubelet removes a node's slices when its plugin is gone for good).
func (p *Plugin) Stop() { p.helper.Stop() }

// Registered is nil once the kubelet has registered the plugin.
func (p *Plugin) Registered() error {
	st := p.helper.RegistrationStatus()
	switch {
	case st == nil:
		return errors.New("the kubelet has not registered the DRA plugin yet (is " + p.cfg.RegistryDir + " the kubelet's plugins_registry?)")
	case !st.PluginRegistered:
		return errors.New("the kubelet refused the DRA plugin: " + st.Error)
	}
	return nil
}

// SliceIntact is nil while the node's devices read back with their
// consumable-capacity fields.
func (p *Plugin) SliceIntact() error { return p.guard.Ready() }
