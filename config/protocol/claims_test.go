package protocol

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestHeldByClaim(t *testing.T) {
	result := func(driver, device string, mem, cores string) resourceapi.DeviceRequestAllocationResult {
		r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: driver, Pool: "n1", Device: device}
		if mem != "" {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{DRACapacityMemory: resource.MustParse(mem), DRACapacityCores: resource.MustParse(cores)}
		}
		return r
	}
	claim := func(class string, cfg *DRAClassConfig, rs ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{}
		c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}}
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: rs}}
		if cfg != nil {
			c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{Requests: []string{"gpu"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: DRADriver, Parameters: runtime.RawExtension{Raw: cfg.Encode()}}}}}
		}
		return c
	}
	online := NewDRAClassConfig(ClassOnline)
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  ClaimHold
		ok    bool
	}{
		{"not allocated", &resourceapi.ResourceClaim{}, ClaimHold{}, false},
		{"general by its DeviceClass", claim("general.gpu.qgpu.io", nil, result(DRADriver, "gpu-1", "4Gi", "30")),
			ClaimHold{Node: "n1", Class: ClassGeneral, Slices: []Slice{{Index: 1, MemoryGiB: 4, Cores: 30}}}, true},
		{"the config's class wins", claim("offline.gpu.qgpu.io", &online, result(DRADriver, "gpu-0", "2Gi", "0")),
			ClaimHold{Node: "n1", Class: ClassOnline, Slices: []Slice{{Index: 0, MemoryGiB: 2}}}, true},
		{"memory not whole GiB rounds up", claim("general.gpu.qgpu.io", nil, result(DRADriver, "gpu-0", "1500Mi", "10")),
			ClaimHold{Node: "n1", Class: ClassGeneral, Slices: []Slice{{Index: 0, MemoryGiB: 2, Cores: 10}}}, true},
		{"no consumed capacity", claim("general.gpu.qgpu.io", nil, result(DRADriver, "gpu-0", "", "")), ClaimHold{}, false},
		{"another driver", claim("nic", nil, result("nic.example.com", "gpu-0", "4Gi", "1")), ClaimHold{}, false},
		{"a device this driver never publishes", claim("general.gpu.qgpu.io", nil, result(DRADriver, "gpu-01", "4Gi", "1")), ClaimHold{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := HeldByClaim(tc.claim)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if diff := cmp.Diff(tc.want, got); ok && diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
