package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// draControlPlane is an apiserver with DRAConsumableCapacity on (so that
// the claims' consumed capacity is stored) and manifests/dra's objects of
// the kinds keep picks.
func draControlPlane(t *testing.T, keep func(kind string) bool) *harness.ControlPlane {
	t.Helper()
	cp := harness.StartWith(t, harness.ControlPlaneOptions{ExtraFlags: []string{"--feature-gates=DRAConsumableCapacity=true"}})
	objs, err := harness.ReadManifests("manifests/dra")
	if err != nil {
		t.Fatal(err)
	}
	var picked []*unstructured.Unstructured
	for _, o := range objs {
		if keep(o.GetKind()) {
			picked = append(picked, o)
		}
	}
	if err := harness.Apply(context.Background(), cp.Config, picked, false); err != nil {
		t.Fatalf("applying manifests/dra: %v", err)
	}
	return cp
}

func draClaim(name string, c protocol.Class, memoryGiB, cores int64) *resourceapi.ResourceClaim {
	caps := map[resourceapi.QualifiedName]resource.Quantity{protocol.DRACapacityMemory: *resource.NewQuantity(memoryGiB<<30, resource.BinarySI)}
	if cores > 0 {
		caps[protocol.DRACapacityCores] = *resource.NewQuantity(cores, resource.DecimalSI)
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: protocol.DRADeviceClass(c),
				Capacity: &resourceapi.CapacityRequirements{Requests: caps}},
		}}}},
	}
}

func draPod(name, claim string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			SchedulerName:  protocol.SchedulerName,
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}},
			Containers: []corev1.Container{{Name: "main", Image: "pause",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
		},
	}
}

// publishSlice publishes node's pool of the driver with cards devices, as
// its agent in DRA mode does (the scheduler offers claimed pods only nodes
// that serve claims).
func publishSlice(t *testing.T, cs kubernetes.Interface, node string, cards int) {
	t.Helper()
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + protocol.DRADriver}, Spec: resourceapi.ResourceSliceSpec{
		Driver: protocol.DRADriver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}}}
	for i := range cards {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: protocol.DRADeviceName(i)})
	}
	if _, err := cs.ResourceV1().ResourceSlices().Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createClaims(t *testing.T, cs kubernetes.Interface, claims ...*resourceapi.ResourceClaim) {
	t.Helper()
	for _, c := range claims {
		if _, err := cs.ResourceV1().ResourceClaims(c.Namespace).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDRAClaimsPlacedByQGPU: the real qgpu-scheduler with the shipped
// profile places pods that ask through claims of the qGPU DeviceClasses
// (docs/dra.md): three claims of 4 GiB / 30 cores share one card of a
// 2×T4 node, each claim's stored allocation names the card the assignment
// names with the consumed capacity; an online and an offline claim share a
// card of the mixed node while no general claim joins them; a claim that
// fits no card stays Pending with the reason, although a node whose agent
// runs device plugins (no ResourceSlice) has room; kubectl qgpu's view counts
// the claimed slices and the checker finds nothing wrong.
func TestDRAClaimsPlacedByQGPU(t *testing.T) {
	cp := draControlPlane(t, func(kind string) bool { return kind == "DeviceClass" })
	harness.StartQGPUScheduler(t, cp, "config/qgpu-scheduler.yaml")
	cs := cp.Client
	createNodes(t, cs,
		builders.GPUNode("t4", false, builders.Cards(2, "Tesla-T4", t4MiB)),
		builders.GPUNode("mixed", true, builders.Cards(1, "Tesla-V100-SXM2-32GB", v100MiB)),
		// Device plugins only: it publishes no ResourceSlice, and no claimed pod goes there.
		builders.GPUNode("plugins", false, builders.Cards(2, "Tesla-V100-SXM2-32GB", v100MiB)),
	)
	publishSlice(t, cs, "t4", 2)
	publishSlice(t, cs, "mixed", 1)
	general := []string{"g1", "g2", "g3"}
	for _, n := range general {
		createClaims(t, cs, draClaim(n, protocol.ClassGeneral, 4, 30))
		createPods(t, cs, draPod("pod-"+n, n))
	}
	cards := map[string]bool{}
	for _, n := range general {
		_, a := waitBound(t, cs, "default", "pod-"+n)
		claim := allocatedClaim(t, cs, n)
		r := claim.Status.Allocation.Devices.Results[0]
		mem, cores := r.ConsumedCapacity[protocol.DRACapacityMemory], r.ConsumedCapacity[protocol.DRACapacityCores]
		s := a.Containers[0].Slices[0]
		if a.Node != "t4" || r.Pool != a.Node || r.Device != protocol.DRADeviceName(s.Index) || mem.Value() != 4<<30 || cores.Value() != 30 ||
			r.ShareID == nil || *r.ShareID == claim.UID {
			t.Errorf("claim %s: result %+v (memory %s, cores %s), assignment %+v", n, r, mem.String(), cores.String(), a)
		}
		cards[r.Device] = true
	}
	if len(cards) != 1 {
		t.Errorf("three 4 GiB / 30-core claims spread over %v, want one card", cards)
	}

	createClaims(t, cs, draClaim("on", protocol.ClassOnline, 8, 0), draClaim("off", protocol.ClassOffline, 8, 50))
	createPods(t, cs, draPod("pod-on", "on"), draPod("pod-off", "off"))
	_, on := waitBound(t, cs, "default", "pod-on")
	_, off := waitBound(t, cs, "default", "pod-off")
	if on.Node != "mixed" || off.Node != "mixed" || on.Containers[0].Slices[0].Index != off.Containers[0].Slices[0].Index {
		t.Errorf("online %+v and offline %+v do not share the mixed node's card", on, off)
	}
	// A general claim never joins a card with online or offline pods, and
	// 15 GiB fits no T4 card beside the others: it waits with the reason.
	createClaims(t, cs, draClaim("big", protocol.ClassGeneral, 15, 10))
	createPods(t, cs, draPod("pod-big", "big"))
	if msg := waitFailedScheduling(t, cs, "default", "pod-big"); !strings.Contains(msg, "0/3 nodes are available") {
		t.Errorf("pod-big: FailedScheduling %q", msg)
	}
	if c := allocatedClaimOrNil(t, cs, "big"); c.Status.Allocation != nil {
		t.Errorf("claim big allocated although its pod is Pending: %+v", c.Status.Allocation)
	}
	c := checkCluster(t, cs)
	claimed := 0
	for _, p := range c.Pods {
		if p.Claimed && p.Assignment != nil {
			claimed++
		}
	}
	if claimed != 5 {
		t.Errorf("kubectl qgpu's view counts %d claimed pods, want 5", claimed)
	}
}

func allocatedClaimOrNil(t *testing.T, cs kubernetes.Interface, name string) *resourceapi.ResourceClaim {
	t.Helper()
	c, err := cs.ResourceV1().ResourceClaims("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// allocatedClaim waits for the claim's allocation, reserved for one pod.
func allocatedClaim(t *testing.T, cs kubernetes.Interface, name string) *resourceapi.ResourceClaim {
	t.Helper()
	var c *resourceapi.ResourceClaim
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c = allocatedClaimOrNil(t, cs, name)
		return c.Status.Allocation != nil && len(c.Status.ReservedFor) == 1, nil
	})
	if err != nil || len(c.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s: not allocated and reserved: %+v", name, c.Status)
	}
	return c
}

// TestDRAOnlyQGPUSchedulerAllocates: with manifests/dra's policy, a claim
// status carrying a gpu.qgpu.io result is refused to every identity but
// qgpu-scheduler's service account (the default scheduler would double-book
// a card), and so is one changing the configuration (the class) beside
// unchanged results; under qgpu-scheduler's account, a result for a request
// of another DeviceClass is refused (the in-tree allocator of a profile
// sharing the account); a status without one, or leaving the results as
// they are, passes.
func TestDRAOnlyQGPUSchedulerAllocates(t *testing.T) {
	cp := draControlPlane(t, func(string) bool { return true })
	ctx := context.Background()
	createClaims(t, cp.Client, draClaim("c", protocol.ClassGeneral, 2, 10))
	share := types.UID("11111111-2222-3333-4444-555555555555")
	allocate := func(cs kubernetes.Interface, driver string) error {
		c, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, "c", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: driver, Pool: "n1", Device: "gpu-0", ShareID: &share}}}}
		_, err = cs.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	}
	clear := func(cs kubernetes.Interface) error {
		c, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, "c", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Status.Allocation = nil
		_, err = cs.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	}
	// The policy takes effect once the apiserver's informer has it.
	waitPolicy(t, "the default scheduler allocating a qGPU device", "devices of driver gpu.qgpu.io are allocated by qgpu-scheduler only", func(ctx context.Context) error {
		err := allocate(impersonate(t, cp, "system:kube-scheduler"), protocol.DRADriver)
		if err == nil {
			return clear(cp.Client) // before the policy took effect: undo, so the next try allocates anew
		}
		return err
	})
	if err := allocate(impersonate(t, cp, "system:kube-scheduler"), "gpu.example.com"); err != nil {
		t.Errorf("another driver's device: %v", err)
	}
	if err := clear(cp.Client); err != nil {
		t.Fatal(err)
	}
	qgpuScheduler := impersonate(t, cp, "system:serviceaccount:qgpu-system:qgpu-scheduler", "system:serviceaccounts", "system:authenticated")
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "qgpu-scheduler-as-kube-scheduler"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kube-scheduler"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "qgpu-system", Name: "qgpu-scheduler"}}}
	if _, err := cp.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := allocate(qgpuScheduler, protocol.DRADriver); err != nil {
		t.Fatalf("qgpu-scheduler allocating its device: %v", err)
	}
	// Another identity keeping the results but changing the configuration
	// the node applies (the class) is refused.
	reclass := func(cs kubernetes.Interface) error {
		c, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, "c", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClass, Requests: []string{"gpu"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: protocol.DRADriver,
				Parameters: runtime.RawExtension{Raw: protocol.NewDRAClassConfig(protocol.ClassOnline).Encode()}}}}}
		_, err = cs.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	}
	// The apiserver itself keeps status.allocation immutable once set
	// (1.34); the policy would refuse it too.
	if err := reclass(impersonate(t, cp, "system:kube-scheduler")); err == nil ||
		!(strings.Contains(err.Error(), "allocated by qgpu-scheduler only") || strings.Contains(err.Error(), "field is immutable")) {
		t.Errorf("another identity changing the allocation's class: %v, want refused", err)
	}
	// Under qgpu-scheduler's own account (which a profile running
	// DynamicResources shares), a gpu.qgpu.io device is allocated only for
	// a request of a qGPU DeviceClass.
	foreign := draClaim("foreign", protocol.ClassGeneral, 2, 10)
	foreign.Spec.Devices.Requests[0].Exactly.DeviceClassName = "any-gpu.example.com"
	createClaims(t, cp.Client, foreign)
	fc, err := cp.Client.ResourceV1().ResourceClaims("default").Get(ctx, "foreign", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fc.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: protocol.DRADriver, Pool: "n1", Device: "gpu-0", ShareID: &share}}}}
	if _, err := qgpuScheduler.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, fc, metav1.UpdateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "request gpu names none") {
		t.Errorf("a qGPU device for a request of another DeviceClass: %v, want refused", err)
	}
	// A deallocation by another identity passes (the resource-claim
	// controller's; here the default scheduler's, which RBAC lets write
	// claim status): it removes the results, it adds none.
	if err := clear(impersonate(t, cp, "system:kube-scheduler")); err != nil {
		t.Errorf("deallocation by another identity: %v", err)
	}
}
