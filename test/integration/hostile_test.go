package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestHostileInput runs the real cluster (RBAC on, the agents on fake
// cards) against bad pods, forged and edited annotations, and hostile node
// inventories. One cluster for all: these cases are cheap, the start is not.
func TestHostileInput(t *testing.T) {
	c := harness.StartTestCluster(t, harness.ClusterOptions{RBAC: true})
	cs := c.Client
	createPods(t, cs, builders.GPUPod("good").General("c", 2, 10).Obj())
	_, good := waitBound(t, cs, "default", "good")
	t.Run("bad pods", func(t *testing.T) { hostileBadPods(t, c) })
	t.Run("forged assignment", func(t *testing.T) { hostileForged(t, c) })
	t.Run("annotation policy", func(t *testing.T) { hostilePolicy(t, c) })
	t.Run("inventory", func(t *testing.T) { hostileInventory(t, c) })
	t.Run("colocation overlay", func(t *testing.T) {
		objs, err := harness.ReadManifests("manifests/overlays/colocation")
		if err != nil {
			t.Fatal(err)
		}
		if err := harness.Apply(context.Background(), c.Config, objs, true); err != nil {
			t.Fatal(err)
		}
	})
	_, again := waitBound(t, cs, "default", "good")
	if !sameAssignment(good, again) {
		t.Errorf("the good pod's assignment changed: %+v, now %+v", good, again)
	}
	checkCluster(t, cs)
	// The agents' grant stores are owner-only (their sockets: deviceplugin tests).
	for _, n := range c.Nodes {
		if fi, err := os.Stat(filepath.Join(n.RootDir, "meta.db")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("node %s: meta.db: %v (mode %v), want 0600", n.Name, err, fi.Mode().Perm())
		}
	}
}

// quantityPod is a general pod whose container asks for the given raw
// quantities (requests == limits unless req is set).
func quantityPod(name string, lim map[string]string, req map[string]string) *corev1.Pod {
	p := builders.GPUPod(name).Obj()
	list := func(m map[string]string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for k, v := range m {
			l[corev1.ResourceName(k)] = resource.MustParse(v)
		}
		return l
	}
	if req == nil {
		req = lim
	}
	p.Spec.Containers = []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
		Resources: corev1.ResourceRequirements{Limits: list(lim), Requests: list(req)}}}
	return p
}

const (
	mem    = protocol.ResourceMemory
	core   = protocol.ResourceCore
	greedy = protocol.ResourceCoreGreedy
)

// hostileBadPods: every rule of docs/design.md#what-a-pod-asks-for broken once. The API server
// refuses some outright (with its own message); the rest stay Pending with
// a FailedScheduling that names the field and the value.
func hostileBadPods(t *testing.T, c *harness.Cluster) {
	hostileAPIRejects(t, c)
	hostileSchedulerRejects(t, c)
	checkOnlyGood(t, c)
}

// hostileAPIRejects: what the API server refuses itself, with its message.
func hostileAPIRejects(t *testing.T, c *harness.Cluster) {
	cs := c.Client
	apiRejects := []struct {
		pod  *corev1.Pod
		want string
	}{
		{quantityPod("negative-memory", map[string]string{mem: "-1", core: "10"}, nil), "must be greater than or equal to 0"},
		{quantityPod("fractional-memory", map[string]string{mem: "1500m", core: "10"}, nil), "must be an integer"},
		{quantityPod("fractional-core", map[string]string{mem: "2", core: "10.5"}, nil), "must be an integer"},
		{quantityPod("request-not-limit", map[string]string{mem: "2", core: "10"}, map[string]string{mem: "1", core: "10"}), "must be equal to"},
	}
	for _, tc := range apiRejects {
		_, err := cs.CoreV1().Pods("default").Create(context.Background(), tc.pod, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pod %s: API server answered %v, want an error containing %q", tc.pod.Name, err, tc.want)
		}
		t.Logf("%s: API: %v", tc.pod.Name, err)
	}
}

// hostileSchedulerRejects: Pending, with the field and value in the event.
func hostileSchedulerRejects(t *testing.T, c *harness.Cluster) {
	cs := c.Client
	two := builders.GPUPod("offline-two-containers").Offline("a", 2, 60).Obj()
	two.Spec.Containers = append(two.Spec.Containers, *two.Spec.Containers[0].DeepCopy())
	two.Spec.Containers[1].Name = "b"
	initPod := builders.GPUPod("init-container").General("c", 2, 10).Obj()
	initPod.Spec.InitContainers = []corev1.Container{*initPod.Spec.Containers[0].DeepCopy()}
	initPod.Spec.InitContainers[0].Name = "init"
	schedRejects := []struct {
		pod  *corev1.Pod
		want string
	}{
		{quantityPod("zero-memory", map[string]string{mem: "0", core: "10"}, nil), mem + ": value 0 must be between 1 and"},
		{quantityPod("zero-core", map[string]string{mem: "2", core: "0"}, nil), core + ": value 0 must be between 1 and 99"},
		{quantityPod("no-memory", map[string]string{core: "10"}, nil), mem + ": missing"},
		{quantityPod("huge-memory", map[string]string{mem: "100000", core: "10"}, nil), mem + ": value 100000 must be between 1 and 16384"},
		{quantityPod("huge-core", map[string]string{mem: "64", core: "6500"}, nil), core + ": value 6500 asks for more than 64 cards"},
		{quantityPod("beyond-int64", map[string]string{mem: "2", core: "1e19"}, nil), core + ": value 10e18 is out of range"},
		{builders.GPUPod("core-150").General("c", 2, 150).Obj(), core + ": value 150 above 100 must be a multiple of 100"},
		{builders.GPUPod("whole-uneven").General("c", 3, 200).Obj(), mem + ": value 3 must split evenly over the 2 whole cards"},
		{builders.GPUPod("online-cores").Class(protocol.ClassOnline).General("c", 2, 10).Obj(), core + ": value 10: online pods ask for " + mem + " only"},
		{builders.GPUPod("offline-cores").Class(protocol.ClassOffline).General("c", 2, 10).Obj(), core + ": value 10: offline pods ask for " + greedy},
		{builders.GPUPod("general-greedy").Container("c", map[string]int64{mem: 2, greedy: 10}).Obj(), greedy + ": value 10 is for offline pods"},
		{builders.GPUPod("greedy-101").Offline("c", 2, 101).Obj(), greedy + ": value 101 must be between 1 and 100"},
		{two, greedy + ": total 120 over its containers exceeds 100"},
		{builders.GPUPod("unknown-class").Class("batch").General("c", 2, 10).Obj(), `unsupported value "batch"`},
		{builders.GPUPod("no-model").Annotation(protocol.AnnotationUseGPUType, "H100").General("c", 2, 10).Obj(), "no card of the requested GPU model"},
		{builders.GPUPod("empty-model").Annotation(protocol.AnnotationUseGPUType, " , ").General("c", 2, 10).Obj(), `names no GPU model`},
		{builders.GPUPod("use-and-nouse").Annotation(protocol.AnnotationUseGPUType, "T4").Annotation(protocol.AnnotationNoUseGPUType, "t4").General("c", 2, 10).Obj(), `both name model "t4"`},
		{builders.GPUPod("with-nvidia-gpu").General("c", 2, 10).Container("g", map[string]int64{"nvidia.com/gpu": 1}).Obj(), "nvidia.com/gpu cannot be combined"},
		{initPod, "initContainers[init]: " + mem + ": qGPU resources are supported in regular containers only"},
	}
	for _, tc := range schedRejects {
		createPods(t, cs, tc.pod)
	}
	for _, tc := range schedRejects {
		msg := waitFailedScheduling(t, cs, "default", tc.pod.Name)
		if !strings.Contains(msg, tc.want) {
			t.Errorf("pod %s: FailedScheduling %q does not contain %q", tc.pod.Name, msg, tc.want)
		}
	}
}

// checkOnlyGood asserts that the ledger holds the good pod's 2 GiB and
// nothing else besides what the named later subtests bound.
func checkOnlyGood(t *testing.T, c *harness.Cluster) {
	t.Helper()
	v := checkCluster(t, c.Client)
	var gib int64
	for _, n := range v.Nodes {
		for _, card := range n.Cards {
			gib += card.UsedMemoryGiB
		}
	}
	if gib != 2 {
		t.Errorf("rejected pods changed the ledger: %d GiB held, want the good pod's 2", gib)
	}
}

func sameAssignment(a, b *protocol.Assignment) bool {
	return a.PodUID == b.PodUID && a.Node == b.Node && strings.EqualFold(mustEncode(a), mustEncode(b))
}

func mustEncode(a *protocol.Assignment) string {
	s, _ := a.Encode()
	return s
}
