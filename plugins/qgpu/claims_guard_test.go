package qgpu

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestClaimsPreBindGuards: PreBind writes an allocation only to the claim
// its cycle read: not to one re-created under the same name since
// PreFilter (another UID), nor to one being deleted.
func TestClaimsPreBindGuards(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(c *resourceapi.ResourceClaim)
		want   string
	}{
		{"re-created", func(c *resourceapi.ResourceClaim) { c.UID = "11111111-0000-0000-0000-000000000000" }, "was re-created"},
		{"being deleted", func(c *resourceapi.ResourceClaim) {
			c.DeletionTimestamp, c.Finalizers = &metav1.Time{}, []string{"example.com/keep"}
		}, "is being deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := draWorld(t, draClaim("g1", protocol.ClassGeneral, "2Gi", "20"))
			p.setNodes(t4Node("n1", 1, false))
			ctx := context.Background()
			pod := draPod("p", "g1")
			state := reservedCycle(t, p, pod, "n1")
			cs := p.handle.ClientSet().(*fake.Clientset)
			c := readClaim(t, p, "g1")
			tc.change(c)
			if err := cs.Tracker().Update(resourceapi.SchemeGroupVersion.WithResource("resourceclaims"), c, c.Namespace); err != nil {
				t.Fatal(err)
			}
			if st := p.PreBind(ctx, state, pod, "n1"); st.IsSuccess() || !strings.Contains(st.Message(), tc.want) {
				t.Fatalf("PreBind: %v, want a failure saying the claim %s", st, tc.want)
			}
			if after := readClaim(t, p, "g1"); after.Status.Allocation != nil {
				t.Fatalf("the claim was allocated: %+v", after.Status.Allocation)
			}
		})
	}
}

// TestClaimsServingNodesPoolName: a ResourceSlice of the driver serves its
// node's claims only in the pool named after the node (the pool the
// allocation names); another pool on the node does not.
func TestClaimsServingNodesPoolName(t *testing.T) {
	p := draWorld(t)
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, s := range []*resourceapi.ResourceSlice{
		{ObjectMeta: metav1.ObjectMeta{Name: "good"}, Spec: resourceapi.ResourceSliceSpec{Driver: protocol.DRADriver, NodeName: ptr.To("n1"),
			Pool: resourceapi.ResourcePool{Name: "n1"}, Devices: []resourceapi.Device{{Name: "gpu-0"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "odd"}, Spec: resourceapi.ResourceSliceSpec{Driver: protocol.DRADriver, NodeName: ptr.To("n2"),
			Pool: resourceapi.ResourcePool{Name: "shared-pool"}, Devices: []resourceapi.Device{{Name: "gpu-0"}}}},
	} {
		if err := idx.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	p.claims.slices = resourcelisters.NewResourceSliceLister(idx)
	got, err := p.claims.servingNodes()
	if err != nil || got.Len() != 1 || !got.Has("n1") {
		t.Fatalf("serving nodes %v, %v: want {n1}", got.UnsortedList(), err)
	}
}
