package dra

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

const testNode = "node-1"

var testCards = []protocol.Card{
	{Index: 0, UUID: "GPU-00000000-0000-0000-0000-000000000000", Model: "Tesla T4", MemoryMiB: 15360, Healthy: true},
	{Index: 1, UUID: "GPU-11111111-1111-1111-1111-111111111111", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Healthy: true},
}

// result is an allocation result of this driver on card index.
func result(request string, index int, memGiB, cores int64) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: protocol.DRADriver, Pool: testNode,
		Device: protocol.DRADeviceName(index), ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
			protocol.DRACapacityMemory: *resource.NewQuantity(memGiB*gib, resource.BinarySI),
			protocol.DRACapacityCores:  *resource.NewQuantity(cores, resource.DecimalSI),
		}}
}

// classConfig is the DeviceClass configuration of class c, as the
// scheduler copies it into the allocation.
func classConfig(c protocol.Class, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: resourceapi.AllocationConfigSourceClass, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: protocol.DRADriver, Parameters: runtime.RawExtension{Raw: protocol.NewDRAClassConfig(c).Encode()}}}}
}

func makeClaim(name string, configs []resourceapi.DeviceAllocationConfiguration, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results, Config: configs}}},
	}
}

// cdiNode writes the node's NVIDIA spec (nvidia.com/gpu=<uuid> per test
// card) and returns the agent's specs over it and its own directory.
func cdiNode(t *testing.T) (*enforce.CDISpecs, string) {
	t.Helper()
	static, dynamic := t.TempDir(), t.TempDir()
	spec := &cdispec.Spec{Version: "0.5.0", Kind: enforce.CDICardKind}
	for _, c := range testCards {
		spec.Devices = append(spec.Devices, cdispec.Device{Name: c.UUID, ContainerEdits: cdispec.ContainerEdits{
			DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidia" + strconv.Itoa(c.Index), Type: "c", Major: 195, Minor: int64(c.Index)}}}})
	}
	w, err := cdi.NewCache(cdi.WithSpecDirs(static), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteSpec(spec, "nvidia.yaml"); err != nil {
		t.Fatal(err)
	}
	specs, err := enforce.NewCDISpecs(dynamic, []string{static})
	if err != nil {
		t.Fatal(err)
	}
	return specs, dynamic
}

// newTestDriver is a driver over the test cards with backend b under policy.
func newTestDriver(t *testing.T, specs *enforce.CDISpecs, checkpoint string, b enforce.Backend, policy protocol.Policy) *Driver {
	t.Helper()
	d, err := NewDriver(testNode, DriverConfig{
		Cards:      func() []protocol.Card { return testCards },
		Grantable:  func(string) error { return nil },
		Backend:    func() (enforce.Backend, protocol.Policy, error) { return b, policy, nil },
		CDI:        specs,
		Checkpoint: Checkpoint{Path: checkpoint},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// specFiles lists the files of dir.
func specFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// readClaimSpec reads the claim spec holding device id.
func readClaimSpec(t *testing.T, dir, id string) cdispec.Spec {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, cdi.GenerateTransientSpecName("claim.gpu.qgpu.io", "slice", id)+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var s cdispec.Spec
	if err := yaml.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	return s
}
