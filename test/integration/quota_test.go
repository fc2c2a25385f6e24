package integration

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/quota"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestQuotaPerNamespace runs the real scheduler binary against a real
// apiserver with the qgpu-quota ConfigMap: two namespaces with different
// limits on the T4 (and none left on the V100), pods beyond a namespace's
// limit stay Pending with the reason naming namespace, model, used and
// limit, and a pod that ends frees its namespace's room.
func TestQuotaPerNamespace(t *testing.T) {
	cp := harness.Start(t)
	cs := cp.Client
	ctx := context.Background()
	for _, ns := range []string{"qgpu-system", "team-a", "team-b"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: quota.ConfigMapNamespace, Name: quota.ConfigMapName},
		Data: map[string]string{
			"team-a": "T4: {cards: 1}\nV100: {cards: 0}",
			"team-b": "T4: {cards: 0.5, memoryGiB: 20}\nV100: {cards: 0}",
		}}
	if _, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createNodes(t, cs,
		builders.GPUNode("t4", false, builders.Cards(2, "Tesla-T4", t4MiB)),
		builders.GPUNode("v100", false, builders.Cards(1, "Tesla-V100-SXM2-32GB", v100MiB)))
	harness.StartQGPUScheduler(t, cp, "config/qgpu-scheduler.yaml")

	pod := func(ns, name string, mem, core int64) *corev1.Pod {
		return builders.GPUPod(name).Namespace(ns).General("c", mem, core).Obj()
	}
	a1, a2, a3 := pod("team-a", "a1", 2, 60), pod("team-a", "a2", 2, 40), pod("team-a", "a3", 2, 10)
	b1, b2 := pod("team-b", "b1", 2, 50), pod("team-b", "b2", 2, 10)
	for _, p := range []*corev1.Pod{a1, a2, b1} {
		createPods(t, cs, p)
		if _, a := waitBound(t, cs, p.Namespace, p.Name); a.Node != "t4" {
			t.Fatalf("pod %s on %s, want t4 (the V100 is closed to both namespaces)", p.Name, a.Node)
		}
	}
	createPods(t, cs, a3, b2)
	for _, c := range []struct {
		pod  *corev1.Pod
		want []string
	}{
		{a3, []string{`namespace "team-a" is over its qGPU quota for model "T4": cards used 1 + asked 0.1 > limit 1`,
			`namespace "team-a" is over its qGPU quota for model "V100": cards used 0 + asked 0.1 > limit 0`}},
		{b2, []string{`namespace "team-b" is over its qGPU quota for model "T4": cards used 0.5 + asked 0.1 > limit 0.5`}},
	} {
		msg := waitFailedScheduling(t, cs, c.pod.Namespace, c.pod.Name)
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("pod %s: FailedScheduling %q does not contain %q", c.pod.Name, msg, w)
			}
		}
		t.Logf("%s: %s", c.pod.Name, msg)
	}

	// a1 ends: team-a's room comes back, team-b's does not.
	finish(t, cs, a1)
	if _, a := waitBound(t, cs, "team-a", "a3"); a.Node != "t4" {
		t.Fatalf("a3 on %s after a1 ended, want t4", a.Node)
	}
	if p, err := cs.CoreV1().Pods("team-b").Get(ctx, "b2", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("b2 bound to %q (%v) although team-b is still at its limit", p.Spec.NodeName, err)
	}
	// Raising team-b's limit lets b2 in without any pod ending.
	cm.Data["team-b"] = "T4: {cards: 0.6}"
	if _, err := cs.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(t, cs, "team-b", "b2")
	checkCluster(t, cs)
}

// finish marks a bound pod Succeeded, as its kubelet would when it ends.
func finish(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodSucceeded
	if _, err := cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("marking %s succeeded: %v", pod.Name, err)
	}
}
