package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/test/e2enode/verify"
)

// TestSharedProblems: the shared claim's verdict fails when the
// allocation changed (another share ID), a pod is not in reservedFor, a
// third consumer is, or a pod runs on another node.
func TestSharedProblems(t *testing.T) {
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{NodeName: node}}
	}
	claim := func(share string, consumers ...string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared", UID: "claim"}}
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Driver: "gpu.qgpu.io", Pool: "n", Device: "gpu-0", ShareID: ptr.To(types.UID(share))}}}}
		for _, name := range consumers {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: name, UID: pod(name, "").UID})
		}
		return c
	}
	a, b := pod("a", "n"), pod("b", "n")
	before := claim("s1", "a")
	for _, tc := range []struct {
		name  string
		after *resourceapi.ResourceClaim
		pods  []*corev1.Pod
		want  string
	}{
		{"joined", claim("s1", "a", "b"), []*corev1.Pod{a, b}, ""},
		{"reallocated", claim("s2", "a", "b"), []*corev1.Pod{a, b}, "want it unchanged"},
		{"not reserved", claim("s1", "a"), []*corev1.Pod{a, b}, "b is not in reservedFor"},
		{"a third consumer", claim("s1", "a", "b", "c"), []*corev1.Pod{a, b}, "want the 2 pods"},
		{"another node", claim("s1", "a", "b"), []*corev1.Pod{a, pod("b", "m")}, `b on node "m"`},
	} {
		got := strings.Join(sharedProblems(before, tc.after, "n", tc.pods...), "; ")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: problems %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestDRADeliveryRegion: under hami-core a claim's container must have
// its claim's region directory at /tmp/vgpu; another claim's, or none,
// is a problem.
func TestDRADeliveryRegion(t *testing.T) {
	c := &draChecker{backend: "hami-core"}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{UID: "c1"}}
	p := &corev1.Pod{}
	region := func(root string) []verify.Line {
		return []verify.Line{{Kind: "mount", Target: "/tmp/vgpu", Root: root}}
	}
	has := func(lines []verify.Line) bool {
		return strings.Contains(strings.Join(c.draDeliveryProblems(p, claim, lines, 30), "; "), "the claim's region directory")
	}
	if has(region("/var/lib/qgpu/hami/c1_gpu")) {
		t.Error("the claim's own region directory is refused")
	}
	if !has(region("/var/lib/qgpu/hami/c2_gpu")) || !has(nil) {
		t.Error("another claim's region directory, or none, is accepted")
	}
}
