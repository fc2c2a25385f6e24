package main

// The hollow node's DRA side (--dra): the kubelet's own DRA manager in the
// container manager, so that the agent's DRA kubelet plugin registers
// through the kubelet's plugin watcher (<root>/kubelet/plugins_registry)
// and prepares and unprepares claims when the kubelet starts and ends pods,
// exactly as on a real node; and the CDI devices the claims name resolved
// from the agent's specs (--cdi-spec-dir), so that a claimed container's
// recorded environment is what the runtime would have applied.

import (
	"context"
	"fmt"
	"slices"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	pluginwatcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	kubeletdra "k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// newClaimManager is the kubelet's DRA manager with its state under the
// kubelet's root directory, as the kubelet keeps it.
func newClaimManager(client clientset.Interface, kubeletRoot string) (*kubeletdra.Manager, error) {
	m, err := kubeletdra.NewManager(klog.Background(), client, kubeletRoot)
	if err != nil {
		return nil, fmt.Errorf("creating the kubelet's DRA manager: %w", err)
	}
	return m, nil
}

// GetPluginRegistrationHandlers hands the kubelet's plugin watcher the DRA
// manager's handler (device plugins register over kubelet.sock instead).
func (m *deviceContainerManager) GetPluginRegistrationHandlers() map[string]cache.PluginHandler {
	if m.claims == nil {
		return nil
	}
	return map[string]cache.PluginHandler{pluginwatcherapi.DRAPlugin: m.claims.GetWatcherHandler()}
}

func (m *deviceContainerManager) PrepareDynamicResources(ctx context.Context, pod *v1.Pod) error {
	if m.claims == nil {
		return nil
	}
	return m.claims.PrepareResources(ctx, pod)
}

func (m *deviceContainerManager) UnprepareDynamicResources(ctx context.Context, pod *v1.Pod) error {
	if m.claims == nil {
		return nil
	}
	return m.claims.UnprepareResources(ctx, pod)
}

func (m *deviceContainerManager) PodMightNeedToUnprepareResources(uid types.UID) bool {
	return m.claims != nil && m.claims.PodMightNeedToUnprepareResources(uid)
}

// claimDevices are the CDI devices a container's claims name, from the
// DRA manager's cache of prepared claims.
func (m *deviceContainerManager) claimDevices(pod *v1.Pod, container *v1.Container) ([]string, error) {
	if m.claims == nil {
		return nil, nil
	}
	info, err := m.claims.GetResources(pod, container)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range info.CDIDevices {
		out = append(out, d.Name)
	}
	return out, nil
}

// cdiEnvs is the environment the CDI devices names set, read from the
// specs in dirs as a runtime would apply them; devices no spec there
// defines (the cards' own, from NVIDIA's spec) are returned apart.
func cdiEnvs(dirs []string, names []string) (envs []string, unresolved []string, err error) {
	if len(names) == 0 || len(dirs) == 0 {
		return nil, names, nil
	}
	c, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the CDI specs in %v: %w", dirs, err)
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	for _, name := range names {
		d := c.GetDevice(name)
		if d == nil {
			unresolved = append(unresolved, name)
			continue
		}
		if err := d.GetSpec().ApplyEdits(spec); err != nil {
			return nil, nil, fmt.Errorf("CDI device %s: %w", name, err)
		}
		if err := d.ApplyEdits(spec); err != nil {
			return nil, nil, fmt.Errorf("CDI device %s: %w", name, err)
		}
	}
	return slices.Clone(spec.Process.Env), unresolved, nil
}
