package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestAgentAllocate runs the real agent (fake cards) under two hollow
// kubelets and the real scheduler: registration, Allocate for every class,
// two identical pods, and a pod with a forged assignment.
func TestAgentAllocate(t *testing.T) {
	cp := harness.StartWith(t, harness.ControlPlaneOptions{RBAC: true})
	harness.StartQGPUScheduler(t, cp, "config/qgpu-scheduler.yaml")
	cs := cp.Client
	kubeconfig := agentCredentials(t, cp)
	start := time.Now()
	v100 := startAgentNode(t, cp, kubeconfig, "v100", "4xV100", true)
	t4 := startAgentNode(t, cp, kubeconfig, "t4", "2xT4", false)
	// Only pods bound by hand go to this node (the twins select t4 by name).
	swap := startAgentNode(t, cp, kubeconfig, "swap", "2xT4", false)
	// The same, its PodResources API refusing every other call.
	flaky, proxy := startFlakyNode(t, cp, kubeconfig, "flaky", "2xT4")

	t.Run("registration", func(t *testing.T) {
		waitAgentCapacity(t, cs, v100, 4, 31)
		waitAgentCapacity(t, cs, t4, 2, 14)
		waitAgentCapacity(t, cs, swap, 2, 14)
		waitAgentCapacity(t, cs, flaky, 2, 14)
		t.Logf("both nodes have qGPU capacity %v after start", time.Since(start).Round(time.Millisecond))
		checkInventory(t, cs, "v100", 4, "Tesla V100-SXM2-32GB", 32510)
		checkInventory(t, cs, "t4", 2, "Tesla T4", 15109)
	})
	t.Run("allocate each class", func(t *testing.T) {
		onV100 := func(name string) *builders.PodBuilder {
			return builders.GPUPod(name).Annotation(protocol.AnnotationUseGPUType, "V100")
		}
		for _, p := range []*corev1.Pod{
			onV100("general").General("c", 5, 30).Obj(),
			onV100("two-containers").General("model", 6, 40).General("sidecar", 1, 10).Obj(),
			builders.GPUPod("online").Online("c", 8).Obj(),
			builders.GPUPod("offline").Offline("c", 8, 50).Obj(),
		} {
			a := runQGPUPod(t, cs, v100, p)
			t.Logf("%s: %s %s", p.Name, a.Class, a)
		}
	})
	var twins map[string]*protocol.Assignment
	t.Run("identical requests", func(t *testing.T) {
		twins = runTwins(t, cs, t4)
	})
	t.Run("forged assignment", func(t *testing.T) {
		if twins == nil {
			t.Skip("needs the twins' assignments")
		}
		runForged(t, cs, t4, twins["twin-a"])
	})
	t.Run("admitted out of creation order", func(t *testing.T) {
		runOutOfOrderTwins(t, cs, swap, "swap")
	})
	// A kubelet that rate-limits the agent's List is asked again, never
	// guessed past (allocate/README.md): each twin still gets its own slice
	// and its grant annotation, and the checker below finds nothing.
	t.Run("admitted out of order, PodResources refusing every other call", func(t *testing.T) {
		runOutOfOrderTwins(t, cs, flaky, "flaky")
		calls, refused := proxy.Counts()
		t.Logf("PodResources proxy: %d calls, %d refused", calls, refused)
		if refused == 0 {
			t.Errorf("the proxy refused none of %d calls: the fault was not exercised", calls)
		}
	})
	checkCluster(t, cs)
}

// checkInventory decodes the node's inventory annotation.
func checkInventory(t *testing.T, cs kubernetes.Interface, node string, cards int, model string, mib int64) {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := protocol.DecodeInventory([]byte(n.Annotations[protocol.AnnotationInventory]))
	if err != nil {
		t.Fatalf("node %s: %v", node, err)
	}
	uuids := sets.New[string]()
	for i, c := range inv.Cards {
		if c.Index != i || c.Model != model || c.MemoryMiB != mib || !c.Healthy {
			t.Errorf("node %s card %d: %+v, want index %d, %s, %d MiB, healthy", node, i, c, i, model, mib)
		}
		uuids.Insert(c.UUID)
	}
	if len(inv.Cards) != cards || uuids.Len() != cards {
		t.Errorf("node %s: inventory %+v, want %d cards with distinct UUIDs", node, inv, cards)
	}
}

// runTwins creates two pods with identical requests that cannot share a T4
// card (10 GiB each of 14), so each has its own card, and checks that each
// container got the card of its own pod's assignment: the agent asks the
// kubelet which pods it has taken in (allocate/README.md), so a swap fails
// the test. Should one happen, checkTwins has also checked the reconciler's
// repair (records moved, grants rewritten, QGPUGrantMismatch on both).
func runTwins(t *testing.T, cs kubernetes.Interface, node *harness.HollowNode) map[string]*protocol.Assignment {
	names := []string{"twin-a", "twin-b"}
	var pods []*corev1.Pod
	for _, n := range names {
		p := builders.GPUPod(n).General("c", 10, 50).Obj()
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node.Name}
		pods = append(pods, p)
	}
	createPods(t, cs, pods...)
	out := map[string]*protocol.Assignment{}
	for _, n := range names {
		_, out[n] = waitBound(t, cs, "default", n)
		ctx, cancel := context.WithTimeout(context.Background(), agentWait)
		err := waitForPodRunning(ctx, cs, "default", n)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	if checkTwins(t, cs, node, names, out) {
		t.Errorf("the agent swapped the twins' slices (each container got the other pod's card): it asks the kubelet which pod it admits, so that must not happen")
	}
	return out
}

// runForged binds a pod by hand (no scheduler) carrying a copy of another
// pod's assignment: the agent must refuse its Allocate, so the kubelet
// rejects it, and it holds no card.
func runForged(t *testing.T, cs kubernetes.Interface, node *harness.HollowNode, stolen *protocol.Assignment) {
	forged := *stolen
	forged.Containers = []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{stolen.Containers[0].Slices[0]}}}
	forged.Containers[0].Slices[0].MemoryGiB, forged.Containers[0].Slices[0].Cores = 2, 10
	value, err := forged.Encode()
	if err != nil {
		t.Fatal(err)
	}
	pod := builders.GPUPod("forged").Annotation(protocol.AnnotationAssignment, value).General("c", 2, 10).Obj()
	pod.Spec.SchedulerName, pod.Spec.NodeName = corev1.DefaultSchedulerName, node.Name
	createPods(t, cs, pod)
	var got *corev1.Pod
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, agentWait, true, func(ctx context.Context) (bool, error) {
		got, err = cs.CoreV1().Pods("default").Get(ctx, "forged", metav1.GetOptions{})
		return err == nil && got.Status.Phase != corev1.PodPending, nil
	})
	if err != nil {
		t.Fatalf("forged pod still pending: %v", err)
	}
	t.Logf("forged pod: phase %s, reason %s: %s", got.Status.Phase, got.Status.Reason, got.Status.Message)
	if got.Status.Phase != corev1.PodFailed || got.Status.Reason != "UnexpectedAdmissionError" {
		t.Errorf("forged pod: phase %s reason %q, want Failed/UnexpectedAdmissionError", got.Status.Phase, got.Status.Reason)
	}
	if _, ok := got.Annotations[protocol.AnnotationGrant]; ok {
		t.Errorf("forged pod got a grant: %s", got.Annotations[protocol.AnnotationGrant])
	}
	if env, err := node.ContainerEnv("default", "forged", "c"); err == nil {
		t.Errorf("forged pod's container was created with env %v", env)
	}
	for _, n := range checkCluster(t, cs).Nodes {
		for card, holders := range n.Holders {
			if slices.Contains(holders, "default/forged") {
				t.Errorf("node %s card %d held by the forged pod: %v", n.Name, card, holders)
			}
		}
	}
}
