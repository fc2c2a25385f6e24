package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// forgedAssignment claims a whole A100 for a pod.
func forgedAssignment(uid string) string {
	a := protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: uid, Node: "a100-0", Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{{Index: 3, UUID: "GPU-forged", MemoryGiB: 80, Cores: 100}}}}}
	s, err := a.Encode()
	if err != nil {
		panic(err)
	}
	return s
}

// hostileForged: without the admission policy, a pod created with a forged
// assignment and grant gets what it asked for, as the scheduler placed it.
func hostileForged(t *testing.T, c *harness.Cluster) {
	cs := c.Client
	p := builders.GPUPod("forged").General("c", 1, 5).Obj()
	p.Annotations[protocol.AnnotationAssignment] = forgedAssignment("forged-uid")
	p.Annotations[protocol.AnnotationGrant] = forgedAssignment("forged-uid")
	createPods(t, cs, p)
	_, a := waitBound(t, cs, "default", "forged")
	s := a.Containers[0].Slices
	if len(s) != 1 || s[0].MemoryGiB != 1 || s[0].Cores != 5 {
		t.Fatalf("forged pod assigned %+v, want its own request: one slice of 1 GiB and 5 cores", s)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		g, err := protocol.DecodeAssignment([]byte(podAnnotation(t, c, "forged", protocol.AnnotationGrant)))
		return err == nil && g.PodUID == a.PodUID && g.Containers[0].Slices[0] == s[0], nil
	})
	if err != nil {
		t.Fatalf("the agent did not replace the forged grant with the slice it handed out: %s", podAnnotation(t, c, "forged", protocol.AnnotationGrant))
	}
	deletePods(t, c, "forged")
}

func podAnnotation(t *testing.T, c *harness.Cluster, name, key string) string {
	p, err := c.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Annotations[key]
}

func deletePods(t *testing.T, c *harness.Cluster, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := c.Client.CoreV1().Pods("default").Delete(context.Background(), n, *metav1.NewDeleteOptions(0)); err != nil {
			t.Errorf("deleting %s: %v", n, err)
		}
	}
}

const policyDenied = "annotation qgpu.io/assignment is written by the qgpu-scheduler only"

// hostilePolicy applies manifests/admission and shows that nobody but the
// scheduler and the agent (not even a cluster admin) can write or change
// the annotations, that the two components still can, and that a restarted
// scheduler, rebuilding from the annotations, still counts a whole card.
func hostilePolicy(t *testing.T, c *harness.Cluster) {
	cs := c.Client
	ctx := context.Background()
	objs, err := harness.ReadManifests("manifests/admission/protect-annotations.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Apply(ctx, c.Config, objs, false); err != nil {
		t.Fatal(err)
	}
	forged := builders.GPUPod("forged-2").General("c", 1, 5).Annotation(protocol.AnnotationAssignment, forgedAssignment("x")).Obj()
	forged.UID = ""
	// The policy takes effect when the apiserver's policy informer has it.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods("default").Create(ctx, forged, metav1.CreateOptions{})
		if err == nil {
			_ = cs.CoreV1().Pods("default").Delete(ctx, forged.Name, *metav1.NewDeleteOptions(0))
		}
		return err != nil && strings.Contains(err.Error(), policyDenied), nil
	})
	if err != nil {
		t.Fatalf("creating a pod with an assignment annotation is not denied by the policy: %v", err)
	}
	whole := builders.GPUPod("whole-t4").Annotation(protocol.AnnotationUseGPUType, "T4").General("c", 14, 100).Obj()
	createPods(t, cs, whole)
	pod, a := waitBound(t, cs, "default", "whole-t4") // the scheduler writes under the policy
	waitGrant(t, cs, "default", "whole-t4")           // and so does the agent
	hostileEdits(t, c, pod)
	restartScheduler(t, c)
	hostileRefill(t, c, a)
}

// hostileEdits tries, as cluster admin, every way to change the annotations.
func hostileEdits(t *testing.T, c *harness.Cluster, pod *corev1.Pod) {
	cs := c.Client
	ctx := context.Background()
	shrunk := strings.Replace(pod.Annotations[protocol.AnnotationAssignment], `"memoryGiB":14`, `"memoryGiB":1`, 1)
	patches := map[string]string{
		"shrink assignment": fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, protocol.AnnotationAssignment, shrunk),
		"drop assignment":   fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, protocol.AnnotationAssignment),
		"forge grant":       fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, protocol.AnnotationGrant, shrunk),
		"forge suspension":  fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, protocol.AnnotationSuspended, protocol.Suspension{}.Encode()),
	}
	for what, patch := range patches {
		_, err := cs.CoreV1().Pods("default").Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), "is written by the qgpu-") {
			t.Errorf("%s: %v, want a denial by the policy", what, err)
		}
	}
	// An unrelated change to the same pod is still allowed.
	if _, err := cs.CoreV1().Pods("default").Patch(ctx, pod.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("labelling a pod under the policy: %v", err)
	}
	// A Binding's annotations are copied onto the pod: denied as well.
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"},
		Spec: corev1.PodSpec{SchedulerName: "nobody", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	createPods(t, cs, plain)
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "plain", Annotations: map[string]string{protocol.AnnotationAssignment: shrunk}},
		Target: corev1.ObjectReference{Kind: "Node", Name: "t4-0"}}
	if err := cs.CoreV1().Pods("default").Bind(ctx, b, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), policyDenied) {
		t.Errorf("binding with an assignment annotation: %v, want a denial by the policy", err)
	}
	deletePods(t, c, "plain")
	if got := podAnnotation(t, c, pod.Name, protocol.AnnotationAssignment); got != pod.Annotations[protocol.AnnotationAssignment] {
		t.Errorf("assignment changed to %s", got)
	}
}

// restartScheduler SIGKILLs the scheduler and starts it again as the
// cluster did; the new one rebuilds its ledger from the annotations.
func restartScheduler(t *testing.T, c *harness.Cluster) {
	t.Helper()
	c.Scheduler.Kill()
	// The new process would wait out the dead one's lease (15 s); deleting
	// it is what its expiry does, sooner.
	if err := c.Client.CoordinationV1().Leases("qgpu-system").Delete(context.Background(), "qgpu-scheduler", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := harness.StartScheduler(context.Background(), harness.SchedulerOptions{
		Kubeconfig: filepath.Join(c.Dir, "scheduler.kubeconfig"),
		Profile:    filepath.Join(c.Dir, "scheduler-config.yaml"),
		LogPath:    c.SchedulerLogPath(),
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Scheduler = s
}

// hostileRefill asks for every T4 card whole again: exactly the cards the
// restarted scheduler knows to be free bind, the one of whole-t4 stays taken.
func hostileRefill(t *testing.T, c *harness.Cluster, held *protocol.Assignment) {
	cs := c.Client
	free := 0
	for _, n := range checkCluster(t, cs).Nodes {
		for _, card := range n.Cards {
			if n.Name == held.Node && card.Empty() {
				free++
			}
		}
	}
	var names []string
	for i := 0; i <= free; i++ {
		p := builders.GPUPod(fmt.Sprintf("refill-%d", i)).Annotation(protocol.AnnotationUseGPUType, "T4").General("c", 14, 100).Obj()
		createPods(t, cs, p)
		names = append(names, p.Name)
	}
	for _, n := range names[:free] {
		waitBound(t, cs, "default", n)
	}
	if msg := waitFailedScheduling(t, cs, "default", names[free]); !strings.Contains(msg, "1 not enough whole free qGPU cards") {
		t.Errorf("refill pod beyond the free cards: %s", msg)
	}
	checkCluster(t, cs)
	deletePods(t, c, append(names, "whole-t4")...)
}
