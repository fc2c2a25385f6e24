package dra

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestGuardTaints: an unhealthy card's device read back with its taint
// keeps the node publishing it tainted; read back without (the API server
// without DRADeviceTaints) switches the node, once, to leaving unhealthy
// cards out: it republishes and records one Normal Event naming the gate,
// and its devices stay (not withdrawn, the node stays ready). A device not
// stored yet changes nothing.
func TestGuardTaints(t *testing.T) {
	cards := append([]protocol.Card(nil), testCards...)
	cards[1].Healthy = false
	want := Shared(testNode, cards, true).Pools[testNode].Slices[0].Devices
	if len(want) != 2 || len(want[1].Taints) != 1 {
		t.Fatalf("published devices %+v: want gpu-1 tainted", want)
	}
	taint := func(d *resourceapi.Device) {
		if d.Name == protocol.DRADeviceName(cards[1].Index) {
			d.Taints = []resourceapi.DeviceTaint{UnhealthyTaint()}
		}
	}
	cases := []struct {
		name          string
		slice         *resourceapi.ResourceSlice
		wantTainted   bool
		wantRepublish int
	}{
		{"taint kept", stored(taint), true, 0},
		{"taint dropped", stored(nil), false, 1},
		{"not stored yet", nil, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tc.slice != nil {
				client = fake.NewClientset(tc.slice)
			}
			recorder := record.NewFakeRecorder(10)
			withdrawn, republished := 0, 0
			g := NewGuard(client, testNode, recorder, func(bool) {}, func() { withdrawn++ })
			g.Republish = func() { republished++ }
			for range 2 { // a second pass changes nothing
				if err := g.Verify(context.Background(), want); err != nil {
					t.Fatal(err)
				}
			}
			if g.Tainted() != tc.wantTainted || republished != tc.wantRepublish {
				t.Errorf("Tainted %v, republished %d times; want %v, %d", g.Tainted(), republished, tc.wantTainted, tc.wantRepublish)
			}
			if withdrawn != 0 || g.Withdrawn() {
				t.Errorf("withdrawn %d times: a dropped taint withdraws nothing", withdrawn)
			}
			if tc.slice != nil && g.Ready() != nil {
				t.Errorf("Ready = %v, want nil", g.Ready())
			}
			close(recorder.Events)
			var events []string
			for e := range recorder.Events {
				events = append(events, e)
			}
			if tc.wantRepublish == 0 && len(events) != 0 {
				t.Errorf("events %v, want none", events)
			}
			if tc.wantRepublish == 1 && (len(events) != 1 || !strings.Contains(events[0], "Normal "+ReasonTaintsDropped) ||
				!strings.Contains(events[0], TaintsGate) || !strings.Contains(events[0], "gpu-1")) {
				t.Errorf("events %v: want one Normal %s naming %s and gpu-1", events, ReasonTaintsDropped, TaintsGate)
			}
		})
	}
}
