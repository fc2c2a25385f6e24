package dra

import (
	"context"
	"errors"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// stored is the node's slice as the API server keeps it, edited by drop.
func stored(drop func(*resourceapi.Device)) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: testNode + "-gpu.qgpu.io-x"},
		Spec: resourceapi.ResourceSliceSpec{Driver: protocol.DRADriver, NodeName: &[]string{testNode}[0],
			Pool: resourceapi.ResourcePool{Name: testNode, ResourceSliceCount: 1}}}
	for _, c := range testCards {
		d := Device(c)
		if drop != nil {
			drop(&d)
		}
		s.Spec.Devices = append(s.Spec.Devices, d)
	}
	return s
}

// TestGuard: devices read back whole make the node ready and the metric
// 1; devices stored without allowMultipleAllocations or a requestPolicy
// withdraw every device once, set the metric 0, keep the node not ready
// and record one Warning Event naming the gate; devices not stored yet
// leave it waiting.
func TestGuard(t *testing.T) {
	want := Shared(testNode, testCards, true).Pools[testNode].Slices[0].Devices
	cases := []struct {
		name        string
		slice       *resourceapi.ResourceSlice
		wantReady   error
		wantMetric  []bool
		wantDropped string
	}{
		{"intact", stored(nil), nil, []bool{true}, ""},
		{"not stored yet", nil, errNotReadBack, nil, ""},
		{"allowMultipleAllocations dropped", stored(func(d *resourceapi.Device) { d.AllowMultipleAllocations = nil }), ErrCapacityDropped, []bool{false}, "gpu-0: allowMultipleAllocations"},
		{"requestPolicy dropped", stored(func(d *resourceapi.Device) {
			c := d.Capacity[protocol.DRACapacityCores]
			c.RequestPolicy = nil
			d.Capacity[protocol.DRACapacityCores] = c
		}), ErrCapacityDropped, []bool{false}, "gpu-1: capacity.cores.requestPolicy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tc.slice != nil {
				client = fake.NewClientset(tc.slice)
			}
			recorder := record.NewFakeRecorder(10)
			var metric []bool
			withdrawn := 0
			g := NewGuard(client, testNode, recorder, func(v bool) { metric = append(metric, v) }, func() { withdrawn++ })
			for range 2 { // a second pass changes nothing
				if err := g.Verify(context.Background(), want); err != nil {
					t.Fatal(err)
				}
			}
			if err := g.Ready(); !errors.Is(err, tc.wantReady) || (tc.wantReady == nil) != (err == nil) {
				t.Errorf("Ready = %v, want %v", err, tc.wantReady)
			}
			if len(metric) != len(tc.wantMetric) || (len(metric) > 0 && metric[0] != tc.wantMetric[0]) {
				t.Errorf("metric set to %v, want %v", metric, tc.wantMetric)
			}
			close(recorder.Events)
			var events []string
			for e := range recorder.Events {
				events = append(events, e)
			}
			if tc.wantDropped == "" {
				if withdrawn != 0 || len(events) != 0 {
					t.Errorf("withdrawn %d times, events %v: want neither", withdrawn, events)
				}
				return
			}
			if withdrawn != 1 || !g.Withdrawn() {
				t.Errorf("withdrawn %d times, want once", withdrawn)
			}
			if len(events) != 1 || !strings.Contains(events[0], "Warning "+ReasonCapacityDropped) ||
				!strings.Contains(events[0], FeatureGate) || !strings.Contains(events[0], tc.wantDropped) {
				t.Errorf("events %v: want one Warning %s naming %s and %q", events, ReasonCapacityDropped, FeatureGate, tc.wantDropped)
			}
		})
	}
}
