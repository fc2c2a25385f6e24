package qgpu

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// A bound pod the informer shows beyond its card's capacity is recorded
// (the API is the truth) with a Warning event on the pod and a count.
func TestObserveOverbookedWarns(t *testing.T) {
	rec := events.NewFakeRecorder(8)
	p := newPluginOn(t, &fakeHandle{cs: fake.NewClientset(), recorder: rec}, nil)
	p.setNodes(t4Node("n1", 1, false))
	before := overbookedCount(t, "memory")
	reserveOn(t, p, builders.GPUPod("b").General("c", 10, 30).Obj(), "n1")
	a := boundPod("a", "n1", "uid-a", protocol.Slice{Index: 0, UUID: "GPU-Tesla-T4-00", MemoryGiB: 10, Cores: 50})
	p.shared.observePod(context.Background(), a)
	if h, ok := p.ledger.Holding(a.UID); !ok || !h.Bound {
		t.Fatalf("the overbooking bound pod was not recorded: %+v (held %v)", h, ok)
	}
	if n, _ := p.ledger.CopyNode("n1", nil); n.Cards[0].UsedMemoryGiB != 20 {
		t.Fatalf("card 0 uses %d GiB, want 20 (both pods, as the API says)", n.Cards[0].UsedMemoryGiB)
	}
	select {
	case e := <-rec.Events:
		for _, want := range []string{"Warning", "QGPUOverbooked", "n1", "card 0", "memory"} {
			if !strings.Contains(e, want) {
				t.Errorf("event %q does not say %q", e, want)
			}
		}
	default:
		t.Fatal("no event for a bound pod beyond its card's memory")
	}
	if got := overbookedCount(t, "memory"); got != before+1 {
		t.Fatalf("qgpu_scheduler_overbooked_total{rule=memory} went %v → %v, want +1", before, got)
	}
}

// overbookedCount reads qgpu_scheduler_overbooked_total{rule} from the
// registry the scheduler's /metrics serves (0 when absent).
func overbookedCount(t *testing.T, rule string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "qgpu_scheduler_overbooked_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "rule" && l.GetValue() == rule {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
