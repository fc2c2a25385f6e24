package enforce

import (
	"os"
	"path/filepath"
	"strconv"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ControlNodes are the driver's device nodes every CUDA container needs
// besides its cards', passed when they exist (as NVIDIA's device plugin does
// with PASS_DEVICE_SPECS).
var ControlNodes = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}

// DeviceNodes passes a container the device nodes of its cards (nvidia<minor>)
// and the control nodes, and no other card's: the kubelet adds them to the
// container as DeviceSpecs, so the runtime creates exactly those nodes and
// allows them in the device cgroup, whatever backend is in use.
type DeviceNodes struct {
	// Root is the host directory holding the nodes (/dev); the agent must see
	// it at the same path to tell which nodes exist.
	Root string
	// Minor maps a card UUID to its minor number (NVML's, or N for fake card N).
	Minor func(uuid string) (int, bool)
}

// Specs returns the DeviceSpecs of slices' cards and the control nodes that
// exist under Root, and the cards whose node is missing (their container would
// run without the card).
func (d DeviceNodes) Specs(slices []protocol.Slice) (specs []*pluginapi.DeviceSpec, missing []string) {
	seen := map[string]bool{}
	add := func(name string) bool {
		if seen[name] {
			return true
		}
		seen[name] = true
		host := filepath.Join(d.Root, name)
		if fi, err := os.Stat(host); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			return false
		}
		specs = append(specs, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + name, HostPath: host, Permissions: "rw"})
		return true
	}
	for _, s := range slices {
		minor, ok := d.Minor(s.UUID)
		if !ok || !add("nvidia"+strconv.Itoa(minor)) {
			missing = append(missing, s.UUID)
		}
	}
	for _, name := range ControlNodes {
		add(name)
	}
	return specs, missing
}
