package main

import (
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
)

// GetDevices and GetAllocatableDevices feed the kubelet's PodResources API
// (<root-dir>/kubelet/pod-resources/kubelet.sock) from the real device
// manager, as the real container manager does; the stub answers nothing,
// which would leave the agent's reconciler blind.
func (m *deviceContainerManager) GetDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices {
	return containerDevices(m.manager().GetDevices(podUID, containerName))
}

func (m *deviceContainerManager) GetAllocatableDevices() []*podresourcesapi.ContainerDevices {
	return containerDevices(m.manager().GetAllocatableDevices())
}

// containerDevices is the kubelet's containerDevicesFromResourceDeviceInstances
// (unexported in pkg/kubelet/cm): like it, one entry per device ID, so that
// clients see exactly what a real kubelet reports.
func containerDevices(devs devicemanager.ResourceDeviceInstances) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	for resource, instances := range devs {
		for id, dev := range instances {
			nodes := dev.GetTopology().GetNodes()
			if len(nodes) == 0 {
				out = append(out, &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: []string{id}})
				continue
			}
			for _, n := range nodes {
				out = append(out, &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: []string{id},
					Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: n.GetID()}}}})
			}
		}
	}
	return out
}
