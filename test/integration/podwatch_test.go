package integration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// podWatch follows a namespace's pods, so a test that creates pods one at
// a time learns each one's fate as soon as the scheduler decides it,
// without polling.
type podWatch struct {
	cs kubernetes.Interface
	ns string
	w  watch.Interface
	// rv is the last resource version seen, to resume a closed watch.
	rv string
}

func watchPods(t *testing.T, cs kubernetes.Interface, ns string) *podWatch {
	t.Helper()
	list, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pw := &podWatch{cs: cs, ns: ns, rv: list.ResourceVersion}
	pw.restart(t)
	t.Cleanup(func() { pw.w.Stop() })
	return pw
}

func (pw *podWatch) restart(t *testing.T) {
	t.Helper()
	w, err := pw.cs.CoreV1().Pods(pw.ns).Watch(context.Background(), metav1.ListOptions{ResourceVersion: pw.rv})
	if err != nil {
		t.Fatalf("watching pods: %v", err)
	}
	pw.w = w
}

// outcome waits for the scheduler's decision on the pod: bound (its node
// set), or found unschedulable for now (condition PodScheduled False, node
// unset).
func (pw *podWatch) outcome(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev, ok := <-pw.w.ResultChan():
			if !ok {
				pw.restart(t)
				continue
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			pw.rv = pod.ResourceVersion
			if pod.Name == name && ev.Type != watch.Deleted && decided(pod) {
				return pod
			}
		case <-timeout:
			t.Fatalf("no scheduling decision on pod %s/%s in 60 s", pw.ns, name)
		}
	}
}

func decided(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" {
		return true
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return true
		}
	}
	return false
}
