package dra

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestDeviceStatus: a prepared claim on a card that goes unhealthy gets
// the condition False in its status.devices entry for that card (with the
// allocation's share ID), a claim on the healthy card gets nothing, the
// entry turns True when the card heals, and a pass with nothing to change
// writes nothing.
func TestDeviceStatus(t *testing.T) {
	share := types.UID("share-a")
	onSick := result("gpu", 0, 4, 30)
	onSick.ShareID = &share
	a, b := makeClaim("a", nil, onSick), makeClaim("b", nil, result("gpu", 1, 4, 30))
	client := fake.NewClientset(a, b)
	prepared := []Prepared{
		{UID: a.UID, Namespace: "ns", Name: "a", Requests: []PreparedRequest{{Request: Request{Name: "gpu", Slices: []protocol.Slice{{Index: 0, UUID: testCards[0].UUID}}}}}},
		{UID: b.UID, Namespace: "ns", Name: "b", Requests: []PreparedRequest{{Request: Request{Name: "gpu", Slices: []protocol.Slice{{Index: 1, UUID: testCards[1].UUID}}}}}},
	}
	cards := append([]protocol.Card(nil), testCards...)
	cards[0].Healthy = false
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &DeviceStatus{Client: client, Node: testNode, Prepared: func() []Prepared { return prepared },
		Cards: func() []protocol.Card { return cards }, Why: func(string) string { return "NVML reported critical Xid 79" },
		Now: func() time.Time { return t0 }}
	read := func(name string) []resourceapi.AllocatedDeviceStatus {
		c, err := client.ResourceV1().ResourceClaims("ns").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c.Status.Devices
	}
	entry := func(status metav1.ConditionStatus, reason, msg string) []resourceapi.AllocatedDeviceStatus {
		return []resourceapi.AllocatedDeviceStatus{{Driver: protocol.DRADriver, Pool: testNode, Device: "gpu-0", ShareID: (*string)(&share),
			Conditions: []metav1.Condition{{Type: DeviceCondition, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(t0)}}}}
	}
	if err := w.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	sick := entry(metav1.ConditionFalse, DeviceReasonUnhealthy, "unhealthy: card 0 ("+testCards[0].UUID+"): NVML reported critical Xid 79")
	if diff := cmp.Diff(sick, read("a")); diff != "" {
		t.Errorf("claim a after its card failed (-want +got):\n%s", diff)
	}
	if got := read("b"); len(got) != 0 {
		t.Errorf("claim b, on a healthy card: %+v, want no entry", got)
	}
	client.ClearActions()
	if err := w.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, act := range client.Actions() {
		if act.GetVerb() == "update" {
			t.Errorf("a pass with nothing to change wrote %v", act)
		}
	}
	cards[0].Healthy = true
	t0 = t0.Add(time.Hour)
	if err := w.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(entry(metav1.ConditionTrue, DeviceReasonHealthy, "healthy: card 0 ("+testCards[0].UUID+")"), read("a")); diff != "" {
		t.Errorf("claim a after its card healed (-want +got):\n%s", diff)
	}
}
