package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/cm/admission"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	kubeletdra "k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/config"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/kubernetes/pkg/kubelet/status"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"
)

// deviceContainerManager is kubemark's stub container manager plus a real
// kubelet device manager: the stock hollow node never calls a device
// plugin, and the point of this node is that kubelet code calls the agent's
// Allocate exactly as on a real node. Only the device-plugin paths are
// delegated; cgroups, CPU and memory managers stay stubs.
type deviceContainerManager struct {
	cm.ContainerManager // the stub

	// onStarted runs once, after the first device manager serves kubelet.sock.
	onStarted func()

	mu       sync.RWMutex
	dm       devicemanager.Manager
	started  bool
	startArg startArgs
	// deviceEnvs keeps what GetResources handed out per pod UID and
	// container name, for the recording runtime.
	deviceEnvs map[string][]kubecontainer.EnvVar
	// claims is the kubelet's DRA manager (--dra; nil without), and
	// cdiDirs the agent's CDI spec directories its claims' devices are
	// resolved from (dra.go).
	claims  *kubeletdra.Manager
	cdiDirs []string
}

type startArgs struct {
	logger       klog.Logger
	activePods   devicemanager.ActivePodsFunc
	sourcesReady config.SourcesReady
}

var _ cm.ContainerManager = &deviceContainerManager{}

func newDeviceContainerManager(onStarted func(), claims *kubeletdra.Manager, cdiDirs []string) (*deviceContainerManager, error) {
	dm, err := devicemanager.NewManagerImpl(nil, topologymanager.NewFakeManager())
	if err != nil {
		return nil, fmt.Errorf("creating device manager: %w", err)
	}
	return &deviceContainerManager{
		ContainerManager: cm.NewStubContainerManager(),
		onStarted:        onStarted,
		dm:               dm,
		deviceEnvs:       map[string][]kubecontainer.EnvVar{},
		claims:           claims,
		cdiDirs:          cdiDirs,
	}, nil
}

func (m *deviceContainerManager) manager() devicemanager.Manager {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.dm
}

func (m *deviceContainerManager) Start(ctx context.Context, node *v1.Node, activePods cm.ActivePodsFunc, getNode cm.GetNodeFunc,
	sourcesReady config.SourcesReady, podStatusProvider status.PodStatusProvider, runtimeService internalapi.RuntimeService,
	localStorageCapacityIsolation bool) error {
	if err := m.ContainerManager.Start(ctx, node, activePods, getNode, sourcesReady, podStatusProvider, runtimeService, localStorageCapacityIsolation); err != nil {
		return err
	}
	m.mu.Lock()
	m.startArg = startArgs{logger: klog.FromContext(ctx), activePods: devicemanager.ActivePodsFunc(activePods), sourcesReady: sourcesReady}
	err := m.startLocked()
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if m.claims != nil {
		if err := m.claims.Start(ctx, kubeletdra.ActivePodsFunc(activePods), kubeletdra.GetNodeFunc(getNode), sourcesReady); err != nil {
			return fmt.Errorf("starting the kubelet's DRA manager: %w", err)
		}
	}
	if m.onStarted != nil {
		m.onStarted()
	}
	return nil
}

// startLocked starts m.dm with empty container state: the fake runtime has
// no containers the device manager would need to know about at start.
func (m *deviceContainerManager) startLocked() error {
	err := m.dm.Start(m.startArg.logger, m.startArg.activePods, m.startArg.sourcesReady, containermap.NewContainerMap(), sets.New[string]())
	if err != nil {
		return fmt.Errorf("starting device manager: %w", err)
	}
	m.started = true
	return nil
}

// RestartDeviceManager replaces the device manager with a new one, as a
// kubelet restart does: the new one reads the checkpoint, recreates
// kubelet.sock and removes every plugin socket, so plugins must notice and
// register again.
func (m *deviceContainerManager) RestartDeviceManager() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.started {
		return fmt.Errorf("device manager not started yet")
	}
	if err := m.dm.Stop(m.startArg.logger); err != nil {
		klog.ErrorS(err, "Stopping device manager before restart")
	}
	dm, err := devicemanager.NewManagerImpl(nil, topologymanager.NewFakeManager())
	if err != nil {
		return fmt.Errorf("recreating device manager: %w", err)
	}
	m.dm = dm
	return m.startLocked()
}

// Stop stops the device manager, which removes kubelet.sock.
func (m *deviceContainerManager) Stop() {
	if err := m.manager().Stop(klog.Background()); err != nil {
		klog.ErrorS(err, "Stopping device manager")
	}
}

func (m *deviceContainerManager) GetDevicePluginResourceCapacity() (v1.ResourceList, v1.ResourceList, []string) {
	return m.manager().GetCapacity()
}

func (m *deviceContainerManager) ShouldResetExtendedResourceCapacity() bool {
	return m.manager().ShouldResetExtendedResourceCapacity()
}

func (m *deviceContainerManager) UpdatePluginResources(node *schedulerframework.NodeInfo, attrs *lifecycle.PodAdmitAttributes) error {
	return m.manager().UpdatePluginResources(node, attrs)
}

func (m *deviceContainerManager) UpdateAllocatedDevices() {
	m.manager().UpdateAllocatedDevices()
}

func (m *deviceContainerManager) GetAllocateResourcesPodAdmitHandler() lifecycle.PodAdmitHandler {
	return allocateAdmitHandler{m}
}

// allocateAdmitHandler does what the topology manager's "none" policy does
// on a real node: call Allocate for every init and app container at
// admission, failing the pod with UnexpectedAdmissionError on an error.
type allocateAdmitHandler struct{ m *deviceContainerManager }

func (h allocateAdmitHandler) Admit(attrs *lifecycle.PodAdmitAttributes) lifecycle.PodAdmitResult {
	pod := attrs.Pod
	dm := h.m.manager()
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if err := dm.Allocate(pod, &c); err != nil {
			klog.ErrorS(err, "Device allocation failed", "pod", klog.KObj(pod), "container", c.Name)
			return admission.GetPodAdmitResult(err)
		}
	}
	return admission.GetPodAdmitResult(nil)
}

// GetResources returns what Allocate gave the container, as the real
// container manager does, and remembers the environment for the recorder.
func (m *deviceContainerManager) GetResources(ctx context.Context, pod *v1.Pod, container *v1.Container) (*kubecontainer.RunContainerOptions, error) {
	opts := &kubecontainer.RunContainerOptions{}
	devOpts, err := m.manager().GetDeviceRunContainerOptions(ctx, pod, container)
	if err != nil {
		return nil, err
	}
	if devOpts != nil {
		opts.Devices = append(opts.Devices, devOpts.Devices...)
		opts.Mounts = append(opts.Mounts, devOpts.Mounts...)
		opts.Envs = append(opts.Envs, devOpts.Envs...)
		opts.Annotations = append(opts.Annotations, devOpts.Annotations...)
		opts.CDIDevices = append(opts.CDIDevices, devOpts.CDIDevices...)
	}
	// A claimed container: the CDI devices of its prepared claims, and
	// for the recorder the environment their specs set.
	names, err := m.claimDevices(pod, container)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		opts.CDIDevices = append(opts.CDIDevices, kubecontainer.CDIDevice{Name: n})
	}
	envs, unresolved, err := cdiEnvs(m.cdiDirs, names)
	if err != nil {
		return nil, err
	}
	if len(unresolved) > 0 {
		klog.V(2).InfoS("CDI devices defined by no spec of the agent's", "pod", klog.KObj(pod), "container", container.Name, "devices", unresolved)
	}
	for _, e := range envs {
		k, v, _ := strings.Cut(e, "=")
		opts.Envs = append(opts.Envs, kubecontainer.EnvVar{Name: k, Value: v})
	}
	m.mu.Lock()
	m.deviceEnvs[envKey(string(pod.UID), container.Name)] = opts.Envs
	m.mu.Unlock()
	return opts, nil
}

// takeDeviceEnvs returns and forgets the environment GetResources computed.
func (m *deviceContainerManager) takeDeviceEnvs(podUID, container string) []kubecontainer.EnvVar {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := envKey(podUID, container)
	envs := m.deviceEnvs[k]
	delete(m.deviceEnvs, k)
	return envs
}

func envKey(podUID, container string) string { return podUID + "/" + container }
