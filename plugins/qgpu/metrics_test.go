package qgpu

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

func counter(t *testing.T, point, reason string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(rejectionsTotal.WithLabelValues(point, reason))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// placements counts the default policy's (fragfit) placements of class.
func placements(t *testing.T, class protocol.Class) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(placementsTotal.WithLabelValues(string(class), "fragfit", "fragfit"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The counters are process-wide: the test compares them before and after.
func TestPlacementAndRejectionCounters(t *testing.T) {
	p := newPlugin(t, nil)
	n1 := t4Node("n1", 1, false) // 14 GiB
	p.setNodes(n1)
	full0, notMixed0, reserve0, placed0 := counter(t, pointFilter, placement.ReasonCardsFull),
		counter(t, pointFilter, placement.ReasonNotMixed), counter(t, pointReserve, placement.ReasonCardsFull), placements(t, protocol.ClassGeneral)
	invalid0 := counter(t, pointPreFilter, reasonInvalidRequest)

	if _, st := schedule(t, p, builders.GPUPod("a").General("c", 10, 50).Obj(), n1); !st.IsSuccess() {
		t.Fatal(st)
	}
	if _, st := schedule(t, p, builders.GPUPod("b").General("c", 10, 10).Obj(), n1); st.IsSuccess() {
		t.Fatal("b fits beside a on a 14 GiB card")
	}
	if _, st := schedule(t, p, builders.GPUPod("on").Online("c", 1).Obj(), n1); st.IsSuccess() {
		t.Fatal("an online pod fits a node not labelled mixed")
	}
	if _, st := schedule(t, p, builders.GPUPod("bad").General("c", 4, 150).Obj(), n1); st.IsSuccess() {
		t.Fatal("a request of 150 cores per card was accepted")
	}
	// Reserve on a node whose room went since Filter.
	ctx, cs := context.Background(), framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs, builders.GPUPod("late").General("c", 10, 10).Obj(), nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Reserve(ctx, cs, builders.GPUPod("late").General("c", 10, 10).Obj(), "n1"); st.IsSuccess() {
		t.Fatal("late reserved 10 GiB on a card with 4 free")
	}

	for _, c := range []struct {
		what        string
		got, before float64
	}{
		{"Filter " + placement.ReasonCardsFull, counter(t, pointFilter, placement.ReasonCardsFull), full0},
		{"Filter " + placement.ReasonNotMixed, counter(t, pointFilter, placement.ReasonNotMixed), notMixed0},
		{"Reserve " + placement.ReasonCardsFull, counter(t, pointReserve, placement.ReasonCardsFull), reserve0},
		{"general placements", placements(t, protocol.ClassGeneral), placed0},
		{"PreFilter " + reasonInvalidRequest, counter(t, pointPreFilter, reasonInvalidRequest), invalid0},
	} {
		if c.got-c.before != 1 {
			t.Errorf("%s: +%v, want +1", c.what, c.got-c.before)
		}
	}
}

func TestReserveReason(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%s: %s", ReasonNoInventory, "annotation qgpu.io/inventory: bad"), ReasonNoInventory},
		{ledger.ErrNoFit, ledger.ErrNoFit.Error()},
		{errors.New(placement.ReasonWholeCards), placement.ReasonWholeCards},
	}
	for _, tc := range cases {
		if got := reserveReason(tc.err); got != tc.want {
			t.Errorf("reserveReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// Every reason Filter and Reserve can report has its counter; an unknown
// one counts as other rather than being lost.
func TestRejectedCountsEveryReason(t *testing.T) {
	registerMetrics()
	for _, point := range []string{pointPreFilter, pointFilter, pointReserve} {
		for _, r := range append(rejectionReasons(), reasonInvalidRequest, "a reason nobody listed") {
			want := r
			if _, ok := registered.rejections[point][r]; !ok {
				want = reasonOther
			}
			before := counter(t, point, want)
			registered.rejections.rejected(point, r)
			if got := counter(t, point, want); got != before+1 {
				t.Errorf("%s %q: counter %s went %v → %v", point, r, want, before, got)
			}
		}
	}
}

func TestRejectedDoesNotAllocate(t *testing.T) {
	registerMetrics()
	r := registered.rejections
	reason := strings.Clone(placement.ReasonCardsFull) // not the constant's own pointer
	if allocs := testing.AllocsPerRun(100, func() { r.rejected(pointFilter, reason) }); allocs != 0 {
		t.Fatalf("counting a rejection allocates %v times", allocs)
	}
}

func TestPoolCollector(t *testing.T) {
	l := ledger.New(0)
	t4 := builders.Cards(3, "T4", 15109) // 14 GiB each
	t4[2].Healthy = false
	v100 := builders.Cards(1, "V100", 32510) // 31 GiB
	l.SetNode("a", &protocol.Inventory{Version: protocol.InventoryVersion, Cards: t4}, "", true)
	l.SetNode("b", &protocol.Inventory{Version: protocol.InventoryVersion, Cards: v100}, "", false)
	l.SetNode("broken", nil, "no annotation", false)
	hold := func(uid, node string, class protocol.Class, s protocol.Slice) {
		if !l.Observe(types.UID(uid), ledger.Holding{Node: node, Class: class, Slices: []protocol.Slice{s}}) {
			t.Fatalf("holding %s not recorded", uid)
		}
	}
	hold("g", "a", protocol.ClassGeneral, protocol.Slice{Index: 0, UUID: t4[0].UUID, MemoryGiB: 4, Cores: 30})
	hold("off", "b", protocol.ClassOffline, protocol.Slice{Index: 0, UUID: v100[0].UUID, MemoryGiB: 8, Cores: 50})
	c := newPoolCollector()
	c.add(l)
	want := `
# HELP qgpu_scheduler_pool_cards [ALPHA] Healthy qGPU cards, by model (a pool: the cards one model-filtered pod can take).
# TYPE qgpu_scheduler_pool_cards gauge
qgpu_scheduler_pool_cards{model="T4"} 2
qgpu_scheduler_pool_cards{model="V100"} 1
# HELP qgpu_scheduler_pool_cores_used_ratio [ALPHA] Share of the healthy cards' compute held (qgpu-core of general pods plus qgpu-core-greedy of offline pods, over 100 per card), by model.
# TYPE qgpu_scheduler_pool_cores_used_ratio gauge
qgpu_scheduler_pool_cores_used_ratio{model="T4"} 0.15
qgpu_scheduler_pool_cores_used_ratio{model="V100"} 0.5
# HELP qgpu_scheduler_pool_empty_cards [ALPHA] Healthy qGPU cards that no pod holds a slice of (what whole-card requests need), by model.
# TYPE qgpu_scheduler_pool_empty_cards gauge
qgpu_scheduler_pool_empty_cards{model="T4"} 1
qgpu_scheduler_pool_empty_cards{model="V100"} 0
# HELP qgpu_scheduler_pool_fragmentation_ratio [ALPHA] Share of the free qgpu-memory of the healthy cards that lies on cards some pod already holds a slice of (0 when nothing is free), by model.
# TYPE qgpu_scheduler_pool_fragmentation_ratio gauge
qgpu_scheduler_pool_fragmentation_ratio{model="T4"} 0.4166666666666667
qgpu_scheduler_pool_fragmentation_ratio{model="V100"} 1
# HELP qgpu_scheduler_pool_memory_capacity_bytes [ALPHA] qgpu-memory of the healthy cards as the ledger counts it, in bytes, by model.
# TYPE qgpu_scheduler_pool_memory_capacity_bytes gauge
qgpu_scheduler_pool_memory_capacity_bytes{model="T4"} 3.0064771072e+10
qgpu_scheduler_pool_memory_capacity_bytes{model="V100"} 3.3285996544e+10
# HELP qgpu_scheduler_pool_memory_used_bytes [ALPHA] qgpu-memory held on the healthy cards (assumed and bound pods), in bytes, by model.
# TYPE qgpu_scheduler_pool_memory_used_bytes gauge
qgpu_scheduler_pool_memory_used_bytes{model="T4"} 4.294967296e+09
qgpu_scheduler_pool_memory_used_bytes{model="V100"} 8.589934592e+09
`
	if err := testutil.CustomCollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
