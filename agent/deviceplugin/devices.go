// Package deviceplugin serves the kubelet device-plugin API (v1beta1) for the
// three qGPU resources and the enabled vocabularies' resources (vocab.go),
// one gRPC server per resource on a unix socket in the kubelet's
// device-plugin directory.
package deviceplugin

import (
	"fmt"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// SocketNames are the plugin sockets' file names by resource.
var SocketNames = map[string]string{
	protocol.ResourceMemory:     "qgpu-memory.sock",
	protocol.ResourceCore:       "qgpu-core.sock",
	protocol.ResourceCoreGreedy: "qgpu-core-greedy.sock",
}

var idKinds = map[string]string{
	protocol.ResourceMemory:     "memory",
	protocol.ResourceCore:       "core",
	protocol.ResourceCoreGreedy: "core-greedy",
}

// Devices returns the device list of resource for cards: one device per GiB
// of memory, or 100 per card for qgpu-core and qgpu-core-greedy, each as
// healthy as its card. IDs name the card, but the kubelet picks them freely
// across cards: they only count; the assignment says which card a container gets.
func Devices(resource string, cards []protocol.Card) []*pluginapi.Device {
	var out []*pluginapi.Device
	for _, c := range cards {
		n := int64(protocol.CoresPerCard)
		if resource == protocol.ResourceMemory {
			n = c.MemoryGiB()
		}
		health := pluginapi.Healthy
		if !c.Healthy {
			health = pluginapi.Unhealthy
		}
		for i := range n {
			out = append(out, &pluginapi.Device{ID: DeviceID(resource, c.UUID, i), Health: health})
		}
	}
	return out
}

// DeviceID is the ID of unit i of resource on the card with uuid.
func DeviceID(resource, uuid string, i int64) string {
	return fmt.Sprintf("%s-%s-%d", uuid, idKinds[resource], i)
}
