package request

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// claimOf is a claim of one request of class c consuming the given capacity
// ("" leaves a capacity out).
func claimOf(name string, c protocol.Class, memory, cores string) *resourceapi.ResourceClaim {
	caps := map[resourceapi.QualifiedName]resource.Quantity{}
	if memory != "" {
		caps[protocol.DRACapacityMemory] = resource.MustParse(memory)
	}
	if cores != "" {
		caps[protocol.DRACapacityCores] = resource.MustParse(cores)
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: protocol.DRADeviceClass(c),
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: caps}},
		}}}},
	}
}

// claimPod has one container per claim name, each using its claim.
func claimPod(claims ...string) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "pod-uid"}}
	for _, c := range claims {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: "pc-" + c, ResourceClaimName: ptr.To(c)})
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "c-" + c,
			Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "pc-" + c}}}})
	}
	return pod
}

func getter(claims ...*resourceapi.ResourceClaim) ClaimGetter {
	return func(ns, name string) (*resourceapi.ResourceClaim, error) {
		for _, c := range claims {
			if c.Namespace == ns && c.Name == name {
				return c, nil
			}
		}
		return nil, errors.New("not found")
	}
}

func TestParseClaims(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		claims []*resourceapi.ResourceClaim
		want   []Container
		class  protocol.Class
	}{
		{"general 4 GiB 30 cores", claimPod("a"), []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassGeneral, "4Gi", "30")},
			[]Container{{Name: "c-a", MemoryGiB: 4, Cores: 30, Cards: 1}}, protocol.ClassGeneral},
		{"general whole card", claimPod("a"), []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassGeneral, "16Gi", "100")},
			[]Container{{Name: "c-a", MemoryGiB: 16, Cores: 100, Cards: 1, Whole: true}}, protocol.ClassGeneral},
		{"online memory only", claimPod("a"), []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassOnline, "2Gi", "")},
			[]Container{{Name: "c-a", MemoryGiB: 2, Cards: 1}}, protocol.ClassOnline},
		{"online cores 0", claimPod("a"), []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassOnline, "2Gi", "0")},
			[]Container{{Name: "c-a", MemoryGiB: 2, Cards: 1}}, protocol.ClassOnline},
		{"offline greedy", claimPod("a", "b"), []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassOffline, "1Gi", "40"), claimOf("b", protocol.ClassOffline, "3Gi", "60")},
			[]Container{{Name: "c-a", MemoryGiB: 1, Cores: 40, Cards: 1}, {Name: "c-b", MemoryGiB: 3, Cores: 60, Cards: 1}}, protocol.ClassOffline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ParseClaims(tc.pod, getter(tc.claims...))
			if err != nil {
				t.Fatal(err)
			}
			if req.Class != tc.class || len(req.Containers) != len(tc.want) || len(req.Claims) != len(tc.want) {
				t.Fatalf("got %+v", req)
			}
			for i, c := range tc.want {
				if req.Containers[i] != c {
					t.Errorf("container %d: got %+v, want %+v", i, req.Containers[i], c)
				}
				ref := req.Claims[i]
				if ref.Container != c.Name || ref.Request != "gpu" || ref.UID != tc.claims[i].UID || ref.Name != tc.claims[i].Name {
					t.Errorf("claim ref %d: %+v", i, ref)
				}
			}
		})
	}
}

func TestParseClaimsRefuses(t *testing.T) {
	mutate := func(c *resourceapi.ResourceClaim, f func(*resourceapi.ExactDeviceRequest)) *resourceapi.ResourceClaim {
		f(c.Spec.Devices.Requests[0].Exactly)
		return c
	}
	shared := claimPod("a")
	shared.Spec.Containers = append(shared.Spec.Containers, v1.Container{Name: "side", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "pc-a"}}}})
	withResources := claimPod("a")
	withResources.Spec.Containers[0].Resources.Limits = v1.ResourceList{protocol.ResourceMemory: resource.MustParse("1")}
	annotated := claimPod("a")
	annotated.Annotations = map[string]string{protocol.AnnotationAppClass: "online"}
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		claims []*resourceapi.ResourceClaim
		want   string
	}{
		{"memory not whole GiB", claimPod("a"), []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassGeneral, "1500Mi", "30")}, "capacity.requests[memory]: value 1500Mi must be whole GiB"},
		{"memory missing", claimPod("a"), []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassGeneral, "", "30")}, "capacity.requests[memory]: missing"},
		{"general without cores", claimPod("a"), []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassGeneral, "1Gi", "")}, "capacity.requests[cores]: value 0 must be between 1 and 100"},
		{"general over 100", claimPod("a"), []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassGeneral, "1Gi", "200")}, "value 200 must be between 1 and 100"},
		{"fractional cores", claimPod("a"), []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassGeneral, "1Gi", "500m")}, "value 500m must be a whole number"},
		{"online with cores", claimPod("a"), []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassOnline, "1Gi", "10")}, "online claims consume memory only"},
		{"offline without greedy", claimPod("a"), []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassOffline, "1Gi", "")}, "the offline claim's greedy share"},
		{"classes mixed", claimPod("a", "b"), []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassOnline, "1Gi", ""), claimOf("b", protocol.ClassOffline, "1Gi", "10")}, "one class"},
		{"count 2", claimPod("a"), []*resourceapi.ResourceClaim{mutate(claimOf("a", protocol.ClassGeneral, "1Gi", "10"), func(r *resourceapi.ExactDeviceRequest) { r.Count = 2 })}, "count: value 2"},
		{"mode All", claimPod("a"), []*resourceapi.ResourceClaim{mutate(claimOf("a", protocol.ClassGeneral, "1Gi", "10"), func(r *resourceapi.ExactDeviceRequest) { r.AllocationMode = resourceapi.DeviceAllocationModeAll })}, `allocationMode: value "All"`},
		{"selectors", claimPod("a"), []*resourceapi.ResourceClaim{mutate(claimOf("a", protocol.ClassGeneral, "1Gi", "10"), func(r *resourceapi.ExactDeviceRequest) {
			r.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: "true"}}}
		})}, "selectors: not supported yet"},
		{"unknown capacity", claimPod("a"), []*resourceapi.ResourceClaim{mutate(claimOf("a", protocol.ClassGeneral, "1Gi", "10"), func(r *resourceapi.ExactDeviceRequest) {
			r.Capacity.Requests["bandwidth"] = resource.MustParse("1")
		})}, "capacity.requests[bandwidth]: unknown capacity"},
		{"no capacity", claimPod("a"), []*resourceapi.ResourceClaim{mutate(claimOf("a", protocol.ClassGeneral, "1Gi", "10"), func(r *resourceapi.ExactDeviceRequest) { r.Capacity = nil })}, "capacity: missing"},
		{"claim shared by two containers", shared, []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassGeneral, "1Gi", "10")}, "used by 2 containers"},
		{"extended resources too", withResources, []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassGeneral, "1Gi", "10")}, "both by extended resources and by ResourceClaims"},
		{"annotation disagrees", annotated, []*resourceapi.ResourceClaim{claimOf("a", protocol.ClassGeneral, "1Gi", "10")}, `value "online" disagrees`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ParseClaims(tc.pod, getter(tc.claims...))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %+v, %v; want ErrInvalid containing %q", req, err, tc.want)
			}
		})
	}
}

func TestParseClaimsPending(t *testing.T) {
	templated := claimPod()
	templated.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("t")}}
	templated.Spec.Containers = []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}}
	allocated := claimOf("a", protocol.ClassGeneral, "1Gi", "10")
	allocated.Status.Allocation = &resourceapi.AllocationResult{}
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		claims []*resourceapi.ResourceClaim
	}{
		{"template not yet instantiated", templated, nil},
		{"claim not created yet", claimPod("a"), nil},
		{"claim still allocated", claimPod("a"), []*resourceapi.ResourceClaim{allocated}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseClaims(tc.pod, getter(tc.claims...)); !errors.Is(err, ErrClaimPending) || errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want ErrClaimPending", err)
			}
		})
	}
}

func TestParseClaimsTemplateAndOtherDrivers(t *testing.T) {
	pod := claimPod()
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("t")}, {Name: "nic", ResourceClaimName: ptr.To("nic")}}
	pod.Spec.Containers = []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}, {Name: "nic"}}}}}
	pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("p-gpu-x")}}
	gen := claimOf("p-gpu-x", protocol.ClassGeneral, "2Gi", "25")
	nic := claimOf("nic", protocol.ClassGeneral, "1Gi", "1")
	nic.Spec.Devices.Requests[0].Exactly.DeviceClassName = "nic.example.com"
	// A generated claim must belong to the pod.
	if _, err := ParseClaims(pod, getter(gen, nic)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not generated for this pod") {
		t.Fatalf("claim of another pod: %v", err)
	}
	gen.OwnerReferences = []metav1.OwnerReference{{UID: pod.UID}}
	req, err := ParseClaims(pod, getter(gen, nic))
	if err != nil || len(req.Containers) != 1 || req.Claims[0].Name != "p-gpu-x" || req.Containers[0].MemoryGiB != 2 {
		t.Fatalf("got %+v, %v", req, err)
	}
	if len(req.OtherClaims) != 1 || req.OtherClaims[0] != "nic" {
		t.Errorf("OtherClaims %v, want [nic] (PreFilter refuses the pod naming it)", req.OtherClaims)
	}
	// A pod whose claims are all another driver's asks nothing of qGPU.
	if req, err := ParseClaims(claimPod(), getter()); req != nil || err != nil {
		t.Fatalf("no claims: %+v, %v", req, err)
	}
}

// TestParseClaimsStale: a claim qGPU allocated for this very pod is stale
// (its cycle never bound the pod) only while the pod is unbound, reserved
// for nobody else and holding only qGPU's results with a share ID.
func TestParseClaimsStale(t *testing.T) {
	pod := claimPod("a")
	allocated := func(mutate func(c *resourceapi.ResourceClaim)) *resourceapi.ResourceClaim {
		c := claimOf("a", protocol.ClassGeneral, "2Gi", "20")
		share := c.UID
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: protocol.DRADriver, Pool: "n1", Device: "gpu-0", ShareID: &share}}}}
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
		if mutate != nil {
			mutate(c)
		}
		return c
	}
	bound := pod.DeepCopy()
	bound.Spec.NodeName = "n1"
	for _, tc := range []struct {
		name  string
		pod   *v1.Pod
		claim *resourceapi.ResourceClaim
		stale bool
	}{
		{"unbound, reserved for it alone", pod, allocated(nil), true},
		{"the pod is bound", bound, allocated(nil), false},
		{"another consumer", pod, allocated(func(c *resourceapi.ResourceClaim) {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "b", UID: "b"})
		}), false},
		{"another driver's result", pod, allocated(func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].Driver = "nic.example.com" }), false},
		{"no share ID", pod, allocated(func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].ShareID = nil }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseClaims(tc.pod, getter(tc.claim))
			var allocatedErr *AllocatedClaimError
			if !errors.As(err, &allocatedErr) || allocatedErr.Stale != tc.stale {
				t.Fatalf("ParseClaims: %v, want an allocated claim with Stale %v", err, tc.stale)
			}
		})
	}
}
