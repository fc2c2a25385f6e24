package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/internal/view"
)

func createNodes(t *testing.T, cs kubernetes.Interface, nodes ...*corev1.Node) {
	t.Helper()
	for _, n := range nodes {
		if _, err := cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating node %s: %v", n.Name, err)
		}
	}
}

func createPods(t *testing.T, cs kubernetes.Interface, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		p = p.DeepCopy()
		p.UID = "" // the API server assigns it
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", p.Name, err)
		}
	}
}

// waitBound waits until the pod is bound and carries the scheduler's assignment.
func waitBound(t *testing.T, cs kubernetes.Interface, ns, name string) (*corev1.Pod, *protocol.Assignment) {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		pod, err = cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && pod.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not bound in 60 s: %v", ns, name, err)
	}
	a, err := protocol.DecodeAssignment([]byte(pod.Annotations[protocol.AnnotationAssignment]))
	if err != nil {
		t.Fatalf("pod %s/%s: bound without a valid assignment: %v", ns, name, err)
	}
	if string(pod.UID) != a.PodUID || a.Node != pod.Spec.NodeName {
		t.Fatalf("pod %s/%s: assignment %+v does not match uid %s node %s", ns, name, a, pod.UID, pod.Spec.NodeName)
	}
	return pod, a
}

// waitFailedScheduling waits for a FailedScheduling event of the pod and
// returns its message; the pod must still be unbound.
func waitFailedScheduling(t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	var msg string
	sel := fields.Set{"involvedObject.name": name, "reason": "FailedScheduling"}.String()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		msg = evs.Items[len(evs.Items)-1].Message
		return true, nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event for %s/%s in 60 s", ns, name)
	}
	pod, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != "" {
		t.Fatalf("pod %s/%s was bound to %s although it should be rejected", ns, name, pod.Spec.NodeName)
	}
	return msg
}

// checkCluster reads the cluster and fails the test on any violated invariant.
func checkCluster(t *testing.T, cs kubernetes.Interface) *view.Cluster {
	t.Helper()
	ctx := context.Background()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := cs.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := view.Build(nodes.Items, pods.Items, 0)
	c.AddClaims(claims.Items)
	if v := append(c.Check(), c.CheckClaims(claims.Items)...); len(v) > 0 {
		var b strings.Builder
		for _, x := range v {
			fmt.Fprintln(&b, x)
		}
		t.Fatalf("invariants violated:\n%s", b.String())
	}
	return c
}
