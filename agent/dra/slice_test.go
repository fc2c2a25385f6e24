package dra

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func TestDevice(t *testing.T) {
	// 16000 MiB: the capacity is the card's bytes, a claim's range ends at
	// its 15 whole GiB.
	card := protocol.Card{Index: 3, UUID: "GPU-3", Model: "Tesla T4", MemoryMiB: 16000, Healthy: true}
	want := resourceapi.Device{
		Name:                     "gpu-3",
		AllowMultipleAllocations: ptr.To(true),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"uuid": {StringValue: ptr.To("GPU-3")}, "index": {IntValue: ptr.To(int64(3))},
			"model": {StringValue: ptr.To("Tesla T4")}, "memoryGiB": {IntValue: ptr.To(int64(15))},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse("16000Mi"), RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:    ptr.To(resource.MustParse("1Gi")),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("1Gi")), Max: ptr.To(resource.MustParse("15Gi")), Step: ptr.To(resource.MustParse("1Gi"))},
			}},
			"cores": {Value: resource.MustParse("100"), RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:    ptr.To(resource.MustParse("0")),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("0")), Max: ptr.To(resource.MustParse("100")), Step: ptr.To(resource.MustParse("1"))},
			}},
		},
	}
	got := Device(card)
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("Device (-want +got):\n%s", diff)
	}
}

func TestShared(t *testing.T) {
	unhealthy := protocol.Card{Index: 2, UUID: "GPU-2", Model: "T4", MemoryMiB: 15360}
	tiny := protocol.Card{Index: 4, UUID: "GPU-4", Model: "tiny", MemoryMiB: 512, Healthy: true}
	cases := []struct {
		name    string
		cards   []protocol.Card
		tainted bool
		want    []string
	}{
		{"every healthy card", testCards, false, []string{"gpu-0", "gpu-1"}},
		{"every healthy card, taints kept", testCards, true, []string{"gpu-0", "gpu-1"}},
		{"unhealthy and sub-GiB cards left out", append([]protocol.Card{unhealthy, tiny}, testCards...), false, []string{"gpu-0", "gpu-1"}},
		{"taints kept: the unhealthy card tainted, sub-GiB left out", append([]protocol.Card{unhealthy, tiny}, testCards...), true,
			[]string{"gpu-2 tainted gpu.qgpu.io/unhealthy:NoSchedule", "gpu-0", "gpu-1"}},
		{"no card: an empty pool", nil, true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := Shared(testNode, tc.cards, tc.tainted)
			pool, ok := res.Pools[testNode]
			if !ok || len(res.Pools) != 1 || len(pool.Slices) != 1 {
				t.Fatalf("pools %+v: want one pool %q with one slice", res.Pools, testNode)
			}
			var got []string
			for _, d := range pool.Slices[0].Devices {
				name := d.Name
				for _, taint := range d.Taints {
					name += fmt.Sprintf(" tainted %s:%s", taint.Key, taint.Effect)
				}
				got = append(got, name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
		})
	}
	if w := Withdrawn(testNode).Pools[testNode]; len(w.Slices) != 1 || len(w.Slices[0].Devices) != 0 {
		t.Errorf("Withdrawn = %+v, want one empty slice", w)
	}
}

func TestClaimCDIKind(t *testing.T) {
	if want := "claim." + protocol.DRADriver + "/slice"; ClaimCDIKind != want {
		t.Errorf("ClaimCDIKind %q, want %q: the driver's name under its own vendor", ClaimCDIKind, want)
	}
}
