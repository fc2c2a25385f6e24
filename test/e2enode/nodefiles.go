package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/qgpu-scheduler/qgpu/agent/nvml/fakespec"
)

// What a GPU node has installed besides the driver, faked per node under
// its directory and bind-mounted where a real node has it (nodeMounts):
// the NVIDIA CDI spec nvidia-ctk would generate, the CDI directory the
// agent writes to, HAMi-core's library and lock directory, and a tmpfs
// for the MPS root.
var nodeBinds = [][2]string{
	{"cdi-static", "/etc/cdi"}, {"cdi-dynamic", "/var/run/cdi"},
	{"hami-lib", "/usr/local/vgpu"}, {"vgpulock", "/tmp/vgpulock"}, {"run-qgpu", "/run/qgpu"},
	{"toolkit", ToolkitDir},
}

// FakeHAMiLib is the HAMi-core library of the e2e nodes: a versioned name,
// as HAMi installs it. Its content is not a library: the probe is a static
// binary, which the dynamic loader (and so /etc/ld.so.preload) never sees.
const FakeHAMiLib = "libvgpu.so.v2.6.0"

// writeNodeFiles creates those directories and files for a node with cards
// fake cards (UUIDs as the agent's --fake-cards makes them for node name),
// with NVIDIA's device plugin spec if devicePluginSpec, and mounts the
// tmpfs of the MPS root (unmountNodeFiles undoes it).
func writeNodeFiles(dir, name string, cards int, devicePluginSpec bool) error {
	for _, b := range nodeBinds {
		if err := os.MkdirAll(filepath.Join(dir, b[0]), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "hami-lib", FakeHAMiLib), []byte("not ELF: e2e-node\n"), 0o644); err != nil {
		return err
	}
	runQGPU := filepath.Join(dir, "run-qgpu")
	_ = unix.Unmount(runQGPU, unix.MNT_DETACH) // left by an interrupted run
	if err := unix.Mount("tmpfs", runQGPU, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=16m"); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", runQGPU, err)
	}
	if !devicePluginSpec {
		return nil
	}
	return writeDevicePluginSpec(filepath.Join(dir, "cdi-dynamic"), name, cards)
}

// unmountNodeFiles unmounts the MPS root's tmpfs.
func unmountNodeFiles(dir string) {
	_ = unix.Unmount(filepath.Join(dir, "run-qgpu"), unix.MNT_DETACH)
}

// writeDevicePluginSpec writes, with the CDI library, the spec NVIDIA's
// device plugin writes under its cdi strategies (GPU Operator with CDI on):
// kind k8s.device-plugin.nvidia.com/gpu, a device per card named by UUID
// with its device node, nvidiactl and NVIDIA_VISIBLE_DEVICES=void for
// every container.
func writeDevicePluginSpec(dir, node string, cards int) error {
	spec := &cdispec.Spec{Kind: "k8s.device-plugin.nvidia.com/gpu", ContainerEdits: cdispec.ContainerEdits{
		Env:         []string{"NVIDIA_VISIBLE_DEVICES=void"},
		DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl", HostPath: filepath.Join(DeviceRoot, "nvidiactl")}}}}
	for i := range cards {
		edits := cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{
			Path: "/dev/nvidia" + strconv.Itoa(i), HostPath: filepath.Join(DeviceRoot, "nvidia"+strconv.Itoa(i))}}}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: fakespec.UUID(node, i), ContainerEdits: edits})
	}
	version, err := cdi.MinimumRequiredVersion(spec)
	if err != nil {
		return err
	}
	spec.Version = version
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return err
	}
	return cache.WriteSpec(spec, "k8s.device-plugin.nvidia.com-gpu.json")
}
