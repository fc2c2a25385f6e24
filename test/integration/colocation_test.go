package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// suspendBound is how long an offline pod may take to show
// qgpu.io/suspended after its online neighbour turns busy, and to lose it
// after the neighbour turns idle: fake-activity sync (50 ms), a poll
// (10 ms), the idle time (100 ms), the annotation's one write a second per
// pod, and the API server, with room for a loaded machine.
const suspendBound = 2 * time.Second

// TestColocation runs issue 7's "done when" on the cluster harness: a
// mixed node's agent runs the priority controller on simulated pod
// processes and cgroups (--fake-activity-file); an online and an offline
// pod share its only card. The online pod turns busy → the offline pod's
// fake cgroup is frozen and the pod shows suspended through the API; idle
// → thawed and shown resumed; the metrics count it. A general pod on
// another node, and the online pod itself, are never marked.
func TestColocation(t *testing.T) {
	nodes, err := harness.ParseNodes("mixed-0:1xV100:mixed,t4-0:1xT4")
	if err != nil {
		t.Fatal(err)
	}
	c := harness.StartTestCluster(t, harness.ClusterOptions{Nodes: nodes, RBAC: true})
	cs := c.Client
	mixed := c.Node("mixed-0")
	online := builders.GPUPod("online").Online("server", 4).Obj()
	offline := builders.GPUPod("offline").Offline("trainer", 4, 50).Obj()
	general := builders.GPUPod("general").Annotation(protocol.AnnotationUseGPUType, "t4").General("main", 2, 30).Obj()
	for _, p := range []*corev1.Pod{online, offline, general} {
		p.UID = ""
	}
	createPods(t, cs, online, offline, general)
	for _, p := range []*corev1.Pod{online, offline, general} {
		waitGrant(t, cs, "default", p.Name)
	}
	if pod, _ := waitBound(t, cs, "default", "general"); pod.Spec.NodeName != "t4-0" {
		t.Fatalf("general pod on %s, want t4-0", pod.Spec.NodeName)
	}
	marked := watchMarks(t, cs)
	offUID := podUID(t, cs, "offline")
	freezeFile := fakeFreezeFile(t, mixed, offUID)

	// Idle: the controller sees both pods (grants re-read every 500 ms) and freezes nothing.
	time.Sleep(time.Second)
	if frozen(t, freezeFile) || suspended(t, cs, "offline") {
		t.Fatal("offline pod suspended while the online pod is idle")
	}
	for i, busy := range []bool{true, false, true, false} {
		state := map[bool]string{true: "busy", false: "idle"}[busy]
		start := time.Now()
		if err := mixed.SetActivity("default/online " + state); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, fmt.Sprintf("cycle %d: offline pod suspended=%v", i, busy), suspendBound, func() bool {
			return suspended(t, cs, "offline") == busy
		})
		shown := time.Since(start)
		if frozen(t, freezeFile) != busy {
			t.Errorf("cycle %d: the fake cgroup disagrees with the annotation (frozen=%v)", i, !busy)
		}
		t.Logf("cycle %d: online %s → offline shown suspended=%v after %v", i, state, busy, shown.Round(time.Millisecond))
	}
	checkPriorityMetrics(t, mixed)
	if got := marked(); len(got) != 1 || got[0] != "default/offline" {
		t.Errorf("pods ever marked suspended: %v, want only default/offline", got)
	}
}

// checkPriorityMetrics: the agent counted the suspensions, and nothing is
// frozen after the last idle.
func checkPriorityMetrics(t *testing.T, n *harness.ClusterNode) {
	t.Helper()
	metrics, err := n.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`qgpu_priority_suspensions_total{card="0",reason="online-busy"`, `qgpu_priority_frozen_pods{card="0"`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if n := metricValue(metrics, "qgpu_priority_suspensions_total"); n < 2 {
		t.Errorf("qgpu_priority_suspensions_total = %v, want ≥ 2", n)
	}
	if n := metricValue(metrics, "qgpu_priority_frozen_pods"); n != 0 {
		t.Errorf("qgpu_priority_frozen_pods = %v after idle, want 0", n)
	}
}

// watchMarks records every pod that ever carries the suspended annotation.
func watchMarks(t *testing.T, cs kubernetes.Interface) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: fields.Everything().String()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	go func() {
		for e := range w.ResultChan() {
			if p, ok := e.Object.(*corev1.Pod); ok && e.Type != watch.Error {
				if _, on := p.Annotations[protocol.AnnotationSuspended]; on {
					mu.Lock()
					seen[p.Namespace+"/"+p.Name] = true
					mu.Unlock()
				}
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for k := range seen {
			out = append(out, k)
		}
		return out
	}
}

func podUID(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID)
}

func suspended(t *testing.T, cs kubernetes.Interface, name string) bool {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, ok := p.Annotations[protocol.AnnotationSuspended]
	return ok
}

// fakeFreezeFile finds the freeze file of the offline pod's GPU container
// in the node's fake cgroup tree, once the agent has made it.
func fakeFreezeFile(t *testing.T, n *harness.ClusterNode, uid string) string {
	t.Helper()
	var file string
	waitUntil(t, "the offline pod's fake cgroup", 5*time.Second, func() bool {
		// The GPU container's cgroup: the controller freezes containers, never the pod.
		matches, _ := filepath.Glob(filepath.Join(n.FakeCgroupRoot(), "kubepods.slice", "*", "*"+strings.ReplaceAll(uid, "-", "_")+".slice", "*.scope", "cgroup.freeze"))
		if len(matches) == 1 {
			file = matches[0]
		}
		return file != ""
	})
	return file
}

func frozen(t *testing.T, file string) bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b)) == "1"
}

func waitUntil(t *testing.T, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(bound); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
	}
}

// metricValue sums the samples of a metric family in a Prometheus text page.
func metricValue(page, name string) float64 {
	var sum float64
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			var v float64
			fields := strings.Fields(line)
			fmt.Sscan(fields[len(fields)-1], &v)
			sum += v
		}
	}
	return sum
}
