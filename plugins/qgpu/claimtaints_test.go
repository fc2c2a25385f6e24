package qgpu

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

var unhealthyTaint = resourceapi.DeviceTaint{Key: protocol.DRATaintUnhealthy, Effect: resourceapi.DeviceTaintEffectNoSchedule}

// TestTolerated: upstream's rule (structured's taintPreventsAllocation):
// NoSchedule and NoExecute keep a device from a request that does not
// tolerate them, None does not; every claim of the pod must tolerate.
func TestTolerated(t *testing.T) {
	exists := resourceapi.DeviceToleration{Key: protocol.DRATaintUnhealthy, Operator: resourceapi.DeviceTolerationOpExists}
	other := resourceapi.DeviceToleration{Key: "example.com/other", Operator: resourceapi.DeviceTolerationOpExists}
	onlyNoExecute := resourceapi.DeviceToleration{Key: protocol.DRATaintUnhealthy, Operator: resourceapi.DeviceTolerationOpExists,
		Effect: resourceapi.DeviceTaintEffectNoExecute}
	noExecute := resourceapi.DeviceTaint{Key: "example.com/evict", Effect: resourceapi.DeviceTaintEffectNoExecute}
	none := resourceapi.DeviceTaint{Key: "example.com/note", Effect: resourceapi.DeviceTaintEffectNone}
	for _, tc := range []struct {
		name   string
		taints []resourceapi.DeviceTaint
		claims [][]resourceapi.DeviceToleration
		want   bool
	}{
		{"NoSchedule, no toleration", []resourceapi.DeviceTaint{unhealthyTaint}, [][]resourceapi.DeviceToleration{nil}, false},
		{"NoExecute, no toleration", []resourceapi.DeviceTaint{noExecute}, [][]resourceapi.DeviceToleration{nil}, false},
		{"None does not keep claims off", []resourceapi.DeviceTaint{none}, [][]resourceapi.DeviceToleration{nil}, true},
		{"tolerated by key", []resourceapi.DeviceTaint{unhealthyTaint}, [][]resourceapi.DeviceToleration{{exists}}, true},
		{"a toleration of another key", []resourceapi.DeviceTaint{unhealthyTaint}, [][]resourceapi.DeviceToleration{{other}}, false},
		{"a toleration of another effect", []resourceapi.DeviceTaint{unhealthyTaint}, [][]resourceapi.DeviceToleration{{onlyNoExecute}}, false},
		{"one claim of two tolerates", []resourceapi.DeviceTaint{unhealthyTaint}, [][]resourceapi.DeviceToleration{{exists}, nil}, false},
		{"one taint of two tolerated", []resourceapi.DeviceTaint{unhealthyTaint, noExecute}, [][]resourceapi.DeviceToleration{{exists}}, false},
		{"no taint", nil, [][]resourceapi.DeviceToleration{nil}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tolerated(tc.taints, tc.claims); got != tc.want {
				t.Errorf("tolerated = %v, want %v", got, tc.want)
			}
		})
	}
}

// taintedSlices gives the plugin a ResourceSlice lister with node's pool of
// cards devices, the devices of index in tainted carrying taint.
func (p *QGPU) taintedSlices(t *testing.T, node string, cards int, taint resourceapi.DeviceTaint, tainted ...int) {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-qgpu"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: protocol.DRADriver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}}}
	for i := range cards {
		d := resourceapi.Device{Name: protocol.DRADeviceName(i)}
		for _, j := range tainted {
			if i == j {
				d.Taints = []resourceapi.DeviceTaint{taint}
			}
		}
		s.Spec.Devices = append(s.Spec.Devices, d)
	}
	if err := idx.Add(s); err != nil {
		t.Fatal(err)
	}
	p.claims.slices = resourcelisters.NewResourceSliceLister(idx)
}

// TestClaimsAvoidTaintedCards: a claim is not allocated on a card whose
// device carries the agent's unhealthy taint, though the node's inventory
// still calls it healthy: it lands on the other card; with both tainted
// the pod does not fit the node. A None taint does not matter.
func TestClaimsAvoidTaintedCards(t *testing.T) {
	for _, tc := range []struct {
		name     string
		taint    resourceapi.DeviceTaint
		tainted  []int
		wantCard string // "" : not placed
	}{
		{"card 0 tainted", unhealthyTaint, []int{0}, "gpu-1"},
		{"card 1 tainted", unhealthyTaint, []int{1}, "gpu-0"},
		{"both tainted", unhealthyTaint, []int{0, 1}, ""},
		{"a None taint on both", resourceapi.DeviceTaint{Key: "example.com/note", Effect: resourceapi.DeviceTaintEffectNone}, []int{0, 1}, "any"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := draWorld(t, draClaim("c1", protocol.ClassGeneral, "4Gi", "30"))
			node := t4Node("n1", 2, false)
			p.setNodes(node)
			p.taintedSlices(t, "n1", 2, tc.taint, tc.tainted...)
			got, st := schedule(t, p, draPod("p", "c1"), node)
			if tc.wantCard == "" {
				if st.IsSuccess() {
					t.Fatalf("placed on %s, want no fit: every card tainted", got)
				}
				if c := readClaim(t, p, "c1"); c.Status.Allocation != nil {
					t.Errorf("claim allocated: %+v", c.Status.Allocation)
				}
				return
			}
			if !st.IsSuccess() || got != "n1" {
				t.Fatalf("schedule: %q %v", got, st)
			}
			a := readClaim(t, p, "c1").Status.Allocation
			if a == nil || len(a.Devices.Results) != 1 {
				t.Fatalf("allocation %+v", a)
			}
			if tc.wantCard != "any" && a.Devices.Results[0].Device != tc.wantCard {
				t.Errorf("allocated %s, want %s", a.Devices.Results[0].Device, tc.wantCard)
			}
		})
	}
}

// TestUntoleratedCards: the claims' tolerations, read from the claims
// (today's parser refuses a qGPU request with tolerations, so only a
// claim changed since could carry one), spare a tolerated card.
func TestUntoleratedCards(t *testing.T) {
	tolerant := draClaim("tolerant", protocol.ClassGeneral, "4Gi", "30")
	tolerant.Spec.Devices.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{
		{Key: protocol.DRATaintUnhealthy, Operator: resourceapi.DeviceTolerationOpExists}}
	p := draWorld(t, draClaim("plain", protocol.ClassGeneral, "4Gi", "30"), tolerant)
	p.taintedSlices(t, "n1", 3, unhealthyTaint, 0, 2)
	for _, tc := range []struct {
		claim string
		want  map[string][]int
	}{
		{"plain", map[string][]int{"n1": {0, 2}}},
		{"tolerant", nil},
	} {
		req := &request.Request{Claims: []request.ClaimRef{{Namespace: "default", Name: tc.claim, Request: "gpu"}}}
		got, err := p.claims.untoleratedCards(req)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: untolerated cards (-want +got):\n%s", tc.claim, diff)
		}
	}
}
