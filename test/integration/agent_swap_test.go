package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/internal/view"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// runOutOfOrderTwins makes the kubelet admit the younger of two identical
// pods first, deterministically: the pods (each assigned its own card, by
// hand, as PreBind would) are bound while the kubelet is paused, the younger
// one first, so the kubelet's watch delivers them in two batches, younger
// first, while the agent already sees both. The order rule alone would answer
// the younger pod's first call with the older pod's slice; the agent asks the
// kubelet's PodResources API which pods it has taken in, so each twin must get
// its own slice (allocate/README.md). Were they swapped, the reconciler's
// report is checked and the twins deleted.
func runOutOfOrderTwins(t *testing.T, cs kubernetes.Interface, node *harness.HollowNode, prefix string) {
	names := []string{prefix + "-a", prefix + "-b"} // prefix-a is older
	out := map[string]*protocol.Assignment{}
	for i, n := range names {
		p := builders.GPUPod(n).General("c", 10, 50).Obj()
		p.Spec.SchedulerName = "none" // no scheduler: the test assigns and binds
		createPods(t, cs, p)
		out[n] = assignByHand(t, cs, node.Name, n, i)
	}
	resume, err := node.PauseKubelet()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resume() }() // a stopped kubelet would ignore the cleanup's SIGTERM
	bind(t, cs, node.Name, names[1])
	time.Sleep(200 * time.Millisecond)
	bind(t, cs, node.Name, names[0])
	time.Sleep(500 * time.Millisecond) // the agent's informer sees both bound
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		ctx, cancel := context.WithTimeout(context.Background(), agentWait)
		err := waitForPodRunning(ctx, cs, "default", n)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	if checkTwins(t, cs, node, names, out) {
		t.Errorf("the kubelet admitted %s before %s and the agent swapped their slices", names[1], names[0])
	}
}

// assignByHand writes the assignment PreBind would: card index, 10 GiB, 50 cores.
func assignByHand(t *testing.T, cs kubernetes.Interface, node, name string, card int) *protocol.Assignment {
	t.Helper()
	ctx := context.Background()
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := protocol.DecodeInventory([]byte(n.Annotations[protocol.AnnotationInventory]))
	if err != nil {
		t.Fatal(err)
	}
	p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := &protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(p.UID), Node: node, Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{
			{Index: card, UUID: inv.Cards[card].UUID, MemoryGiB: 10, Cores: 50}}}}}
	value, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{protocol.AnnotationAssignment: value}}})
	if _, err := cs.CoreV1().Pods("default").Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return a
}

func bind(t *testing.T, cs kubernetes.Interface, node, name string) {
	t.Helper()
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := cs.CoreV1().Pods("default").Bind(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding %s to %s: %v", name, node, err)
	}
}

// checkTwins finds which twin's slice each container really got (from its
// env), checks the grants and events against that, and returns whether they
// swapped. After a swap it checks the checker's report and deletes the twins.
func checkTwins(t *testing.T, cs kubernetes.Interface, node *harness.HollowNode, names []string, out map[string]*protocol.Assignment) bool {
	t.Helper()
	if out[names[0]].Containers[0].Slices[0].UUID == out[names[1]].Containers[0].Slices[0].UUID {
		t.Fatalf("twins assigned the same card: %s / %s", out[names[0]], out[names[1]])
	}
	got := map[string]protocol.ContainerAssignment{}
	for _, n := range names {
		env, err := node.ContainerEnv("default", n, "c")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range names {
			if cmp.Equal(wantEnv(out[o].Containers[0], protocol.ClassGeneral), env) {
				got[n] = out[o].Containers[0]
			}
		}
		if _, ok := got[n]; !ok {
			t.Fatalf("%s: env %v is neither twin's slice", n, env)
		}
	}
	swapped := got[names[0]].Slices[0].UUID != out[names[0]].Containers[0].Slices[0].UUID
	for _, n := range names {
		checkTwinGrant(t, cs, n, out[n], got[n], swapped)
	}
	if swapped {
		endSwap(t, cs, names)
	}
	return swapped
}

// checkTwinGrant checks the pod's grant (what its container really got)
// and the QGPUGrantMismatch events: present exactly when the twins swapped.
func checkTwinGrant(t *testing.T, cs kubernetes.Interface, name string, a *protocol.Assignment, got protocol.ContainerAssignment, swapped bool) {
	t.Helper()
	want := *a
	want.Containers = []protocol.ContainerAssignment{got}
	var grant *protocol.Assignment
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		grant = waitGrant(t, cs, "default", name)
		return cmp.Equal(&want, grant), nil
	})
	if err != nil {
		t.Errorf("%s: grant %s, want what its container got: %s", name, grant, &want)
	}
	evs := podEvents(t, cs, "default", name, "QGPUGrantMismatch")
	if swapped != (len(evs) > 0) {
		t.Errorf("%s: swapped=%v but QGPUGrantMismatch events %q", name, swapped, evs)
	}
}

// endSwap checks that the invariant checker names the swap (each twin's
// grant names the other's card, every card's totals are right: Swapped, no
// violation), then deletes the twins so that the checks of the rest of the
// test start clean.
func endSwap(t *testing.T, cs kubernetes.Interface, names []string) {
	t.Helper()
	nodes, _ := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	pods, _ := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	c := view.Build(nodes.Items, pods.Items, 0)
	if v := c.Check(); len(v) > 0 {
		t.Errorf("checker after the swap: %q, want no violation", v)
	}
	got := c.Swapped()
	slices.Sort(got)
	if want := []string{"default/" + names[0], "default/" + names[1]}; !cmp.Equal(want, got) {
		t.Errorf("swapped pods after the swap: %q, want %q", got, want)
	}
	for _, n := range names {
		if err := cs.CoreV1().Pods("default").Delete(context.Background(), n, *metav1.NewDeleteOptions(0)); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, agentWait, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		for _, p := range l.Items {
			if slices.Contains(names, p.Name) {
				return false, err
			}
		}
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("swapped twins not deleted: %v", err)
	}
}

// startFlakyNode is startAgentNode whose agent asks the kubelet's
// PodResources API through a proxy that refuses every other call with
// ResourceExhausted, as the kubelet's rate limiter does: each fresh call
// is refused, and a call repeated within 100 ms of a refusal is answered.
// So every first ask of an Allocate is refused (an agent that took a
// refusal for "no list" guesses by creation order on every call), and an
// agent that asks again gets the list.
func startFlakyNode(t *testing.T, cp *harness.ControlPlane, kubeconfig, name, cards string) (*harness.HollowNode, *harness.PodResourcesProxy) {
	t.Helper()
	root := t.TempDir()
	var lastRefusal time.Time
	proxy, err := harness.StartPodResourcesProxy(filepath.Join(root, "flaky-pod-resources.sock"), kubeletPodResources(root),
		harness.PodResourcesHooks{Refuse: func(string, int) error { // the proxy serialises these calls
			if !lastRefusal.IsZero() && time.Since(lastRefusal) < 100*time.Millisecond {
				lastRefusal = time.Time{}
				return nil
			}
			lastRefusal = time.Now()
			return status.Error(codes.ResourceExhausted, "rejected by rate limit (proxy)")
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	return startAgentNodeIn(t, cp, kubeconfig, name, cards, false, root, proxy.Socket), proxy
}
