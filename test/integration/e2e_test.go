package integration

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// placed is where a pod's containers landed: node and card indexes per container.
type placed struct {
	Node  string
	Cards map[string][]int
}

func on(node string, cards ...int) placed {
	return placed{Node: node, Cards: map[string][]int{"": cards}}
}

// TestE2EExamples is the product as users meet it: the cluster of the
// playground (DefaultNodes, RBAC on, the scheduler with the generated
// ConfigMap's config, the agents as their ServiceAccount) and every pod of
// manifests/examples, created one at a time so that each placement rule of
// docs/ledger.md is asserted on a known state.
func TestE2EExamples(t *testing.T) {
	// The examples' placements are binpack's (Tencent qGPU's); the default
	// profile's fragfit is checked by the scheduler tests and the replay.
	profile, err := harness.BinpackProfile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := harness.StartTestCluster(t, harness.ClusterOptions{RBAC: true, Profile: profile})
	cs := c.Client
	pods := examplePods(t)
	steps := []struct {
		pod  string
		want placed
	}{
		// Offline pods go to the mixed node only; the first takes card 0.
		{"offline-pod", on("v100-mixed-0", 0)},
		// Online pods spread away from cards with offline pods.
		{"online-pod", on("v100-mixed-0", 1)},
		// Offline pods pack onto offline cards, away from online ones.
		{"offline-pod-2", on("v100-mixed-0", 0)},
		{"online-pod-2", on("v100-mixed-0", 1)},
		// General pods: binpack onto the fullest node and card that fits.
		{"general-5g-30c", on("t4-0", 0)},
		{"common-pod", on("t4-0", 0)},
		// use-gputype: T4 only, and binpack again (card 0 now holds 3 of its 4 pods, 12 of 14 GiB).
		{"t4-only", on("t4-0", 0)},
		// Each container its own slice: the 6 GiB model on card 1, the 1 GiB
		// sidecar in card 0's last 2 GiB and last pod slot (4 on a 16 GB T4).
		{"two-containers", placed{Node: "t4-0", Cards: map[string][]int{"model": {1}, "sidecar": {0}}}},
		// Whole cards only on empty cards: the T4 and V100 cards are taken.
		{"whole-two-cards", on("a100-0", 0, 1)},
		// nouse-gputype T4: the fullest shareable card that is not a T4.
		{"not-t4", on("a100-0", 2)},
	}
	for _, s := range steps {
		got := e2eLand(t, c, pods[s.pod])
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("pod %s placed wrongly (-want +got):\n%s", s.pod, diff)
		}
	}
	t.Run("rejected examples", func(t *testing.T) { e2eRejected(t, c, pods) })
	t.Run("deletes free slices", func(t *testing.T) { e2eDeleteFrees(t, c) })
	t.Run("kubectl-qgpu nodes", func(t *testing.T) { e2eKubectlNodes(t, c) })
	checkCluster(t, cs)
	assertNoForbidden(t, c)
}

// examplePods reads manifests/examples (through its kustomization, in the
// default namespace) as Pods by name.
func examplePods(t *testing.T) map[string]*corev1.Pod {
	t.Helper()
	objs, err := harness.ReadManifests("manifests/examples")
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{}
	for _, o := range objs {
		var p corev1.Pod
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &p); err != nil {
			t.Fatalf("example %s: %v", o.GetName(), err)
		}
		pods[p.Name] = &p
	}
	return pods
}

// e2eLand creates pod, waits until it is bound, Running and granted by the
// agent, checks that every container's env from the agent names the UUIDs
// of its assigned cards as the node's inventory lists them, and returns
// where it landed (containers under "" when all share the same cards).
func e2eLand(t *testing.T, c *harness.Cluster, pod *corev1.Pod) placed {
	t.Helper()
	createPods(t, c.Client, pod)
	got, a := waitBound(t, c.Client, pod.Namespace, pod.Name)
	e2eWaitGranted(t, c.Client, got)
	node := c.Node(a.Node)
	if node == nil {
		t.Fatalf("pod %s bound to unknown node %s", pod.Name, a.Node)
	}
	uuids := inventoryUUIDs(t, c.Client, a.Node)
	p := placed{Node: a.Node, Cards: map[string][]int{}}
	for _, ca := range a.Containers {
		var idx, want []string
		for _, s := range ca.Slices {
			p.Cards[ca.Name] = append(p.Cards[ca.Name], s.Index)
			idx, want = append(idx, fmt.Sprint(s.Index)), append(want, uuids[s.Index])
		}
		env, err := node.ContainerEnv(pod.Namespace, pod.Name, ca.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got := env["NVIDIA_VISIBLE_DEVICES"]; got != strings.Join(want, ",") {
			t.Errorf("pod %s container %s on cards %v: NVIDIA_VISIBLE_DEVICES=%q, want the cards' UUIDs %q",
				pod.Name, ca.Name, idx, got, strings.Join(want, ","))
		}
	}
	return p.collapse()
}

// collapse folds identical per-container cards into the "" key.
func (p placed) collapse() placed {
	var first []int
	for _, cards := range p.Cards {
		if first != nil && !cmp.Equal(first, cards) {
			return p
		}
		first = cards
	}
	return placed{Node: p.Node, Cards: map[string][]int{"": first}}
}

func inventoryUUIDs(t *testing.T, cs kubernetes.Interface, node string) map[int]string {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := protocol.DecodeInventory([]byte(n.Annotations[protocol.AnnotationInventory]))
	if err != nil {
		t.Fatalf("node %s: %v", node, err)
	}
	uuids := map[int]string{}
	for _, card := range inv.Cards {
		uuids[card.Index] = card.UUID
	}
	return uuids
}

// e2eWaitGranted waits until the pod runs and carries the agent's grant.
func e2eWaitGranted(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		last, err = cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		_, granted := last.Annotations[protocol.AnnotationGrant]
		return granted && last.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not Running with the agent's grant in 30 s (phase %s, annotations %v)",
			pod.Namespace, pod.Name, last.Status.Phase, last.Annotations)
	}
}

// e2eRejected creates the examples labelled expect=rejected and checks
// each FailedScheduling reason names the broken rule and its value: without
// the admission policies (manifests/admission) the scheduler still refuses
// them, Pending.
func e2eRejected(t *testing.T, c *harness.Cluster, pods map[string]*corev1.Pod) {
	want := map[string]string{
		"rejected-core-150":       "tke.cloud.tencent.com/qgpu-core: value 150 above 100 must be a multiple of 100",
		"rejected-online-core":    "online pods ask for tke.cloud.tencent.com/qgpu-memory only",
		"rejected-offline-greedy": "tke.cloud.tencent.com/qgpu-core-greedy: value 150 must be between 1 and 100",
	}
	for name, p := range pods {
		if p.Spec.SchedulerName != protocol.SchedulerName {
			// Refused only by the admission policy, which this cluster does
			// not apply (TestRequireSchedulerPolicy and the playground do).
			continue
		}
		if p.Labels["examples.qgpu.io/expect"] == "rejected" && want[name] == "" {
			t.Errorf("example %s is labelled rejected but has no expected reason here", name)
		}
	}
	for name := range want {
		createPods(t, c.Client, pods[name])
	}
	for name, reason := range want {
		if msg := waitFailedScheduling(t, c.Client, "default", name); !strings.Contains(msg, reason) {
			t.Errorf("pod %s: FailedScheduling %q does not contain %q", name, msg, reason)
		}
	}
}

// e2eDeleteFrees: a T4 pod that fits the node's totals (9 of 28 GiB free)
// but no T4 card (card 0 has 1 GiB and no pod slot free, card 1 8 GiB) lands
// on card 1 once the two-container pod is deleted.
func e2eDeleteFrees(t *testing.T, c *harness.Cluster) {
	big := builders.GPUPod("t4-9g").Annotation(protocol.AnnotationUseGPUType, "T4").General("c", 9, 50).Obj()
	createPods(t, c.Client, big)
	if msg := waitFailedScheduling(t, c.Client, "default", big.Name); !strings.Contains(msg, "insufficient qGPU card memory, cores or pod slots") {
		t.Errorf("FailedScheduling %q does not say the cards are full", msg)
	}
	ctx := context.Background()
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, "two-containers", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	got, a := waitBound(t, c.Client, "default", big.Name)
	e2eWaitGranted(t, c.Client, got)
	if a.Node != "t4-0" || a.Containers[0].Slices[0].Index != 1 {
		t.Errorf("pod %s landed on %s card %d, want the freed t4-0 card 1", big.Name, a.Node, a.Containers[0].Slices[0].Index)
	}
}

// e2eKubectlNodes checks that `kubectl qgpu nodes` lists every holder on its card.
func e2eKubectlNodes(t *testing.T, c *harness.Cluster) {
	bin, err := harness.BinaryPath("", "KUBECTL_QGPU_BIN", "kubectl-qgpu")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "nodes", "--kubeconfig="+c.Kubeconfig).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl-qgpu nodes: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n")[1:] {
		f := strings.Fields(line)
		got[f[0]+"/"+f[1]] = f[len(f)-1]
	}
	want := map[string]string{
		"t4-0/0":         "default/common-pod,default/general-5g-30c,default/t4-only",
		"t4-0/1":         "default/t4-9g",
		"v100-mixed-0/0": "default/offline-pod,default/offline-pod-2",
		"v100-mixed-0/1": "default/online-pod,default/online-pod-2",
		"a100-0/0":       "default/whole-two-cards",
		"a100-0/1":       "default/whole-two-cards",
		"a100-0/2":       "default/not-t4",
		"a100-0/3":       "-",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kubectl-qgpu nodes holders (-want +got):\n%s\n%s", diff, out)
	}
}

// The node list of ClusterOptions and PLAYGROUND_NODES.
func TestParseNodes(t *testing.T) {
	got, err := harness.ParseNodes("2*t4:2xT4, mix:1xA100+1xT4:mixed")
	if err != nil {
		t.Fatal(err)
	}
	want := []harness.NodeSpec{
		{Name: "t4-0", Cards: "2xT4"}, {Name: "t4-1", Cards: "2xT4"},
		{Name: "mix", Cards: "1xA100,1xT4", Mixed: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", "t4", "T4:2xT4", "a:1xT4:spread", "0*a:1xT4", "a:1xT4,a:1xT4", "a:"} {
		if _, err := harness.ParseNodes(bad); err == nil {
			t.Errorf("ParseNodes(%q) accepted", bad)
		}
	}
}
