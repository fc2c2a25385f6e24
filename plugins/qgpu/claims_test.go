package qgpu

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// draWorld is a plugin whose listers and clientset hold the qGPU
// DeviceClasses and the given claims.
func draWorld(t *testing.T, claims ...*resourceapi.ResourceClaim) *QGPU {
	t.Helper()
	p := newPlugin(t, nil)
	claimIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	classIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	ctx := context.Background()
	for _, c := range []protocol.Class{protocol.ClassGeneral, protocol.ClassOnline, protocol.ClassOffline} {
		dc := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: protocol.DRADeviceClass(c)},
			Spec: resourceapi.DeviceClassSpec{Config: []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: protocol.DRADriver, Parameters: runtime.RawExtension{Raw: protocol.NewDRAClassConfig(c).Encode()}},
			}}}}}
		if err := classIdx.Add(dc); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range claims {
		if err := claimIdx.Add(c); err != nil {
			t.Fatal(err)
		}
		if _, err := p.handle.ClientSet().ResourceV1().ResourceClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p.claims = &claimAccess{claims: resourcelisters.NewResourceClaimLister(claimIdx), classes: resourcelisters.NewDeviceClassLister(classIdx)}
	return p
}

// servedBy gives the plugin a ResourceSlice lister holding, per node, a pool
// of the driver with devices devices.
func (p *QGPU) servedBy(t *testing.T, devices map[string]int) {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for node, n := range devices {
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-qgpu"}, Spec: resourceapi.ResourceSliceSpec{
			Driver: protocol.DRADriver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}}}
		for i := range n {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: protocol.DRADeviceName(i)})
		}
		if err := idx.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	p.claims.slices = resourcelisters.NewResourceSliceLister(idx)
}

// TestClaimsGoToServingNodes: a claimed pod's cycle is narrowed to the
// nodes whose agent serves claims (a pool of the driver with devices); a
// node that withdrew its devices, or publishes none, is left out, and with
// none left the pod is refused with the reason.
func TestClaimsGoToServingNodes(t *testing.T) {
	p := draWorld(t, draClaim("e1", protocol.ClassGeneral, "1Gi", "10"))
	p.servedBy(t, map[string]int{"dra-1": 2, "withdrawn": 0})
	res, st := p.PreFilter(context.Background(), framework.NewCycleState(), draPod("p", "e1"), nil)
	if !st.IsSuccess() || res == nil || res.NodeNames.UnsortedList()[0] != "dra-1" || res.NodeNames.Len() != 1 {
		t.Fatalf("PreFilter: %+v %v, want the nodes {dra-1}", res, st)
	}
	p.servedBy(t, map[string]int{"withdrawn": 0})
	if _, st := p.PreFilter(context.Background(), framework.NewCycleState(), draPod("p", "e1"), nil); st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != ReasonNoClaimNode {
		t.Fatalf("no serving node: %v", st)
	}
}

func draClaim(name string, c protocol.Class, memory, cores string) *resourceapi.ResourceClaim {
	caps := map[resourceapi.QualifiedName]resource.Quantity{protocol.DRACapacityMemory: resource.MustParse(memory)}
	if cores != "" {
		caps[protocol.DRACapacityCores] = resource.MustParse(cores)
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("00000000-0000-0000-0000-0000000000" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: protocol.DRADeviceClass(c),
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: caps}},
		}}}},
	}
}

func draPod(name, claim string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("pod-" + name)},
		Spec: v1.PodSpec{
			SchedulerName:  protocol.SchedulerName,
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}},
			Containers:     []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
		},
	}
}

// reservedCycle runs PreFilter and Reserve of pod on node, as a scheduling
// cycle does before it binds; the caller goes on with PreBind.
func reservedCycle(t *testing.T, p *QGPU, pod *v1.Pod, node string) fwk.CycleState {
	t.Helper()
	ctx := context.Background()
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Reserve(ctx, cs, pod, node); !st.IsSuccess() {
		t.Fatal(st)
	}
	return cs
}

// settledClaim reads the claim until want holds, for at most a minute
// (the stale release runs off the scheduling goroutine; only a failing
// test waits it out), and returns it. A want that holds already returns
// at once.
func settledClaim(t *testing.T, p *QGPU, name string, want func(*resourceapi.ResourceClaim) bool) *resourceapi.ResourceClaim {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	c := readClaim(t, p, name)
	for !want(c) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		c = readClaim(t, p, name)
	}
	return c
}

func readClaim(t *testing.T, p *QGPU, name string) *resourceapi.ResourceClaim {
	t.Helper()
	c, err := p.handle.ClientSet().ResourceV1().ResourceClaims("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClaimsShareACard: three claims of 4 GiB and 30 cores share one card
// of a 2×T4 node under the shipped policy, each allocation names its card,
// the consumed capacity, a share ID of its own and the class's config,
// is bound to the node and reserved for its pod; a fourth of 4 GiB still
// fits the other card, and the assignment annotation agrees with the claim.
func TestClaimsShareACard(t *testing.T) {
	claims := []*resourceapi.ResourceClaim{
		draClaim("a1", protocol.ClassGeneral, "4Gi", "30"), draClaim("a2", protocol.ClassGeneral, "4Gi", "30"),
		draClaim("a3", protocol.ClassGeneral, "4Gi", "30"),
	}
	p := draWorld(t, claims...)
	node := t4Node("n1", 2, false)
	p.setNodes(node)
	cards, shares := map[string]bool{}, map[types.UID]bool{}
	for _, c := range claims {
		pod := draPod("p-"+c.Name, c.Name)
		got, st := schedule(t, p, pod, node)
		if !st.IsSuccess() || got != "n1" {
			t.Fatalf("%s: %v %v", c.Name, got, st)
		}
		after := readClaim(t, p, c.Name)
		a := after.Status.Allocation
		if a == nil || len(a.Devices.Results) != 1 {
			t.Fatalf("%s: allocation %+v", c.Name, a)
		}
		r := a.Devices.Results[0]
		cards[r.Device] = true
		mem, cores := r.ConsumedCapacity[protocol.DRACapacityMemory], r.ConsumedCapacity[protocol.DRACapacityCores]
		if r.Driver != protocol.DRADriver || r.Pool != "n1" || r.Request != "gpu" || r.ShareID == nil || *r.ShareID == c.UID || shares[*r.ShareID] ||
			mem.Value() != 4<<30 || cores.Value() != 30 {
			t.Errorf("%s: result %+v (memory %s cores %s)", c.Name, r, mem.String(), cores.String())
		}
		if r.ShareID != nil {
			shares[*r.ShareID] = true
		}
		if len(a.Devices.Config) != 1 || a.Devices.Config[0].Source != resourceapi.AllocationConfigSourceClass ||
			!strings.Contains(string(a.Devices.Config[0].Opaque.Parameters.Raw), `"class":"general"`) {
			t.Errorf("%s: config %+v", c.Name, a.Devices.Config)
		}
		if a.NodeSelector == nil || a.NodeSelector.NodeSelectorTerms[0].MatchFields[0].Values[0] != "n1" {
			t.Errorf("%s: node selector %+v", c.Name, a.NodeSelector)
		}
		if len(after.Status.ReservedFor) != 1 || after.Status.ReservedFor[0].UID != pod.UID {
			t.Errorf("%s: reservedFor %+v", c.Name, after.Status.ReservedFor)
		}
		if len(after.Finalizers) != 1 || after.Finalizers[0] != resourceapi.Finalizer {
			t.Errorf("%s: finalizers %v", c.Name, after.Finalizers)
		}
		h, _ := p.ledger.Holding(pod.UID)
		if len(h.Slices) != 1 || protocol.DRADeviceName(h.Slices[0].Index) != r.Device {
			t.Errorf("%s: ledger holds %+v, the claim names %s", c.Name, h, r.Device)
		}
	}
	if len(cards) != 1 {
		t.Errorf("three 30-core slices spread over %v, want one card", cards)
	}
}

// TestClaimsUnreserveReleases: a failed binding takes the claim's
// allocation and reservation back; a claim allocated by someone else
// between PreFilter and PreBind fails the cycle and is left alone.
func TestClaimsUnreserveReleases(t *testing.T) {
	c := draClaim("b1", protocol.ClassOnline, "2Gi", "")
	p := draWorld(t, c)
	node := t4Node("n1", 1, true)
	p.setNodes(node)
	pod := draPod("p", "b1")
	ctx := context.Background()
	if _, err := p.handle.ClientSet().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cs := reservedCycle(t, p, pod, "n1")
	if st := p.PreBind(ctx, cs, pod, "n1"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if readClaim(t, p, "b1").Status.Allocation == nil {
		t.Fatal("PreBind wrote no allocation")
	}
	p.Unreserve(ctx, cs, pod, "n1")
	after := readClaim(t, p, "b1")
	if after.Status.Allocation != nil || len(after.Status.ReservedFor) != 0 {
		t.Fatalf("after Unreserve: %+v", after.Status)
	}

	// Someone else allocates it before PreBind.
	cs = reservedCycle(t, p, pod, "n1")
	other := after.DeepCopy()
	other.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: protocol.DRADriver, Pool: "n1", Device: "gpu-0"}}}}
	if _, err := p.handle.ClientSet().ResourceV1().ResourceClaims("default").UpdateStatus(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := p.PreBind(ctx, cs, pod, "n1"); st.IsSuccess() || !strings.Contains(st.Message(), "allocated by another") {
		t.Fatalf("PreBind over another's allocation: %v", st)
	}
	p.Unreserve(ctx, cs, pod, "n1")
	if readClaim(t, p, "b1").Status.Allocation == nil {
		t.Fatal("Unreserve cleared an allocation it did not write")
	}
}

// TestClaimsPreFilter: a claim not created yet waits (Unschedulable, so
// that the claim's creation requeues the pod), a broken claim is refused
// for good, and a profile that runs DynamicResources refuses qGPU claims
// rather than let two allocators book them.
func TestClaimsPreFilter(t *testing.T) {
	bad := draClaim("c2", protocol.ClassGeneral, "1500Mi", "10")
	p := draWorld(t, draClaim("c1", protocol.ClassGeneral, "1Gi", "10"), bad)
	ctx := context.Background()
	for _, tc := range []struct {
		pod  *v1.Pod
		code fwk.Code
		want string
	}{
		{draPod("missing", "nope"), fwk.Unschedulable, "not found yet"},
		{draPod("broken", "c2"), fwk.UnschedulableAndUnresolvable, "value 1500Mi must be whole GiB"},
	} {
		_, st := p.PreFilter(ctx, framework.NewCycleState(), tc.pod, nil)
		if st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) {
			t.Errorf("%s: %v, want %v containing %q", tc.pod.Name, st, tc.code, tc.want)
		}
	}
	p.draOnce.Do(func() { p.dra = true })
	_, st := p.PreFilter(ctx, framework.NewCycleState(), draPod("ok", "c1"), nil)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "DynamicResources") {
		t.Errorf("profile with DynamicResources: %v", st)
	}
}

// TestClaimsGateOff: an apiserver without DRAConsumableCapacity stores the
// allocation without share ID and consumed capacity; PreBind then fails
// naming the gate, and takes the allocation back.
func TestClaimsGateOff(t *testing.T) {
	p := draWorld(t, draClaim("d1", protocol.ClassGeneral, "2Gi", "20"))
	cs := p.handle.ClientSet().(*fake.Clientset)
	cs.PrependReactor("update", "resourceclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		c := a.(clienttesting.UpdateAction).GetObject().(*resourceapi.ResourceClaim).DeepCopy()
		if c.Status.Allocation != nil {
			for i := range c.Status.Allocation.Devices.Results {
				c.Status.Allocation.Devices.Results[i].ShareID = nil
				c.Status.Allocation.Devices.Results[i].ConsumedCapacity = nil
			}
		}
		return true, c, cs.Tracker().Update(resourceapi.SchemeGroupVersion.WithResource("resourceclaims"), c, c.Namespace)
	})
	node := t4Node("n1", 1, false)
	p.setNodes(node)
	pod := draPod("p", "d1")
	ctx := context.Background()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	state := reservedCycle(t, p, pod, "n1")
	st := p.PreBind(ctx, state, pod, "n1")
	if st.IsSuccess() || !strings.Contains(st.Message(), "DRAConsumableCapacity") {
		t.Fatalf("PreBind on an apiserver without the gate: %v", st)
	}
	if c := readClaim(t, p, "d1"); c.Status.Allocation != nil || len(c.Status.ReservedFor) != 0 {
		t.Fatalf("the capacity-less allocation stayed: %+v", c.Status)
	}
}

// TestClaimsStaleAllocationReleased: a scheduler that died between PreBind
// and Bind left the claim allocated for an unbound pod; the next cycle
// releases it (and then places the pod anew), while a claim another pod
// holds, or one allocated by someone else, is left alone.
func TestClaimsStaleAllocationReleased(t *testing.T) {
	share := types.UID("00000000-0000-0000-0000-0000000000s1")
	stale := draClaim("s1", protocol.ClassGeneral, "1Gi", "10")
	pod := draPod("p", "s1")
	stale.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: protocol.DRADriver, Pool: "n1", Device: "gpu-0", ShareID: &share}}}}
	stale.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: pod.UID}}
	held := stale.DeepCopy()
	held.Name, held.UID = "s2", "00000000-0000-0000-0000-0000000000s2"
	held.Status.Allocation.Devices.Results[0].ShareID = ptr.To(held.UID)
	held.Status.ReservedFor[0].UID = "another-pod"
	foreign := stale.DeepCopy()
	foreign.Name, foreign.UID = "s3", "00000000-0000-0000-0000-0000000000s3"
	foreign.Status.Allocation.Devices.Results[0].ShareID = nil
	p := draWorld(t, stale, held, foreign)
	ctx := context.Background()
	for _, tc := range []struct {
		claim    string
		released bool
	}{{"s1", true}, {"s2", false}, {"s3", false}} {
		_, st := p.PreFilter(ctx, framework.NewCycleState(), draPod("p", tc.claim), nil)
		if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "is allocated") {
			t.Errorf("%s: %v, want Unschedulable (waiting)", tc.claim, st)
		}
		c := settledClaim(t, p, tc.claim, func(c *resourceapi.ResourceClaim) bool { return (c.Status.Allocation == nil) == tc.released })
		if got := c.Status.Allocation == nil; got != tc.released {
			t.Errorf("%s: released %v, want %v", tc.claim, got, tc.released)
		}
	}
}
