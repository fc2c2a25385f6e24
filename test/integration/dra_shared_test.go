package integration

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestDRAClaimOutlivesItsPod: a tenant's pod b joins pod a's allocated
// claim by spec.nodeName (the resource-claim controller reserves the claim
// for b; here the test writes what it would), and a is deleted. The claim
// stays allocated and used by b: its 10 GiB stay held in the scheduler's
// ledger and in kubectl qgpu, and a pod of 8 GiB is not placed on that 15 GiB
// card, until the allocation is cleared; then it is. Fails where the
// ledger counts slices by pod only (eebf961: the second pod is placed).
func TestDRAClaimOutlivesItsPod(t *testing.T) {
	cp := draControlPlane(t, func(kind string) bool { return kind == "DeviceClass" })
	harness.StartQGPUScheduler(t, cp, "config/qgpu-scheduler.yaml")
	cs := cp.Client
	ctx := context.Background()
	createNodes(t, cs, builders.GPUNode("t4", false, builders.Cards(1, "Tesla-T4", t4MiB)))
	publishSlice(t, cs, "t4", 1)
	createClaims(t, cs, draClaim("held", protocol.ClassGeneral, 10, 50))
	createPods(t, cs, draPod("pod-a", "held"))
	a, _ := waitBound(t, cs, "default", "pod-a")
	claim := allocatedClaim(t, cs, "held")

	b := draPod("pod-b", "held")
	b.Spec.NodeName = "t4"
	createPods(t, cs, b)
	b, err := cs.CoreV1().Pods("default").Get(ctx, "pod-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim = setReservedFor(t, cs, claim, a, b)
	if err := cs.CoreV1().Pods("default").Delete(ctx, "pod-a", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	claim = setReservedFor(t, cs, claim, b)

	// kubectl qgpu, as a user runs it, sees the claim's 10 GiB on the card.
	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runKubectlQGPU(ctx, kubeconfig, "nodes")
	if err != nil || !strings.Contains(out, "claim default/held") {
		t.Errorf("kubectl qgpu nodes: %v, stdout %q, stderr %q; want the claim named as the card's holder", err, out, errOut)
	}
	if c := checkCluster(t, cs); c.Nodes[0].Cards[0].UsedMemoryGiB != 10 {
		t.Errorf("kubectl qgpu's view: card 0 holds %d GiB, want the claim's 10", c.Nodes[0].Cards[0].UsedMemoryGiB)
	}

	createClaims(t, cs, draClaim("second", protocol.ClassGeneral, 8, 10))
	createPods(t, cs, draPod("pod-c", "second"))
	if msg := waitFailedScheduling(t, cs, "default", "pod-c"); !strings.Contains(msg, "0/1 nodes are available") {
		t.Errorf("pod-c: FailedScheduling %q", msg)
	}

	// b finishes; the controller clears the reservation and the allocation.
	if err := cs.CoreV1().Pods("default").Delete(ctx, "pod-b", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	claim.Status = resourceapi.ResourceClaimStatus{}
	if _, err := cs.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(t, cs, "default", "pod-c")
	checkCluster(t, cs)
}

// setReservedFor writes the claim's consumers as the resource-claim
// controller does, keeping the allocation.
func setReservedFor(t *testing.T, cs kubernetes.Interface, claim *resourceapi.ResourceClaim, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	c := claim.DeepCopy()
	c.Status.ReservedFor = nil
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	stored, err := cs.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(context.Background(), c, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("reserving claim %s for %d pods: %v", c.Name, len(pods), err)
	}
	if !slices.EqualFunc(stored.Status.ReservedFor, c.Status.ReservedFor, func(x, y resourceapi.ResourceClaimConsumerReference) bool { return x.UID == y.UID }) {
		t.Fatalf("claim %s: reservedFor %+v stored", c.Name, stored.Status.ReservedFor)
	}
	return stored
}

// TestDRASharedClaim: three pods of qgpu-scheduler name one ResourceClaim
// (a Deployment's replicas sharing one slice). The first allocates it;
// the others join it on its node instead of waiting for its release
// (eebf961 ran them one at a time): all three are bound to the claim's node,
// the claim is reserved for all three, the card holds the slice once, and
// the checker finds nothing wrong.
func TestDRASharedClaim(t *testing.T) {
	cp := draControlPlane(t, func(kind string) bool { return kind == "DeviceClass" })
	harness.StartQGPUScheduler(t, cp, "config/qgpu-scheduler.yaml")
	cs := cp.Client
	ctx := context.Background()
	createNodes(t, cs, builders.GPUNode("t4", false, builders.Cards(1, "Tesla-T4", t4MiB)),
		builders.GPUNode("t4b", false, builders.Cards(1, "Tesla-T4", t4MiB)))
	publishSlice(t, cs, "t4", 1)
	publishSlice(t, cs, "t4b", 1)
	createClaims(t, cs, draClaim("one", protocol.ClassGeneral, 6, 30))
	createPods(t, cs, draPod("first", "one"))
	first, _ := waitBound(t, cs, "default", "first")
	createPods(t, cs, draPod("second", "one"), draPod("third", "one"))
	for _, name := range []string{"second", "third"} {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Spec.NodeName != "", nil
		}); err != nil {
			t.Fatalf("%s not bound: %v", name, err)
		}
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != first.Spec.NodeName {
			t.Errorf("%s bound to %s, the claim's node is %s", name, p.Spec.NodeName, first.Spec.NodeName)
		}
		if _, ok := p.Annotations[protocol.AnnotationAssignment]; ok {
			t.Errorf("%s has an assignment of its own: its slice is the claim's", name)
		}
	}
	claim, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, "one", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(claim.Status.ReservedFor) != 3 {
		t.Errorf("claim reserved for %+v, want the three pods", claim.Status.ReservedFor)
	}
	c := checkCluster(t, cs)
	var held int64
	for _, n := range c.Nodes {
		for _, card := range n.Cards {
			held += card.UsedMemoryGiB
		}
	}
	if held != 6 {
		t.Errorf("the cards hold %d GiB, want the shared slice's 6 once", held)
	}
}
