package qgpu

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/quota"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

func quotaConfigMap(data map[string]string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: quota.ConfigMapNamespace, Name: quota.ConfigMapName}, Data: data}
}

// Two namespaces with different limits on the T4: each is held to its own,
// over the limit a pod gets the reason naming namespace, model, used and
// limit, and a pod that ends frees its namespace's room.
func TestQuotaPerNamespace(t *testing.T) {
	p := newPlugin(t, nil)
	p.setNodes(t4Node("t4", 4, false))
	p.shared.quotaChanged(context.Background(), p.handle, quotaConfigMap(map[string]string{
		"team-a": "T4: {cards: 1}",
		"team-b": "T4: {cards: 2, memoryGiB: 12}",
	}))
	type step struct {
		pod  *v1.Pod
		want string // "" placed, else a part of the reason
	}
	steps := []step{
		{builders.GPUPod("a1").Namespace("team-a").General("c", 2, 60).Obj(), ""},
		{builders.GPUPod("a2").Namespace("team-a").General("c", 2, 40).Obj(), ""},
		{builders.GPUPod("a3").Namespace("team-a").General("c", 2, 10).Obj(),
			`namespace "team-a" is over its qGPU quota for model "T4": cards used 1 + asked 0.1 > limit 1`},
		{builders.GPUPod("b1").Namespace("team-b").General("c", 10, 100).Obj(), ""},
		{builders.GPUPod("b2").Namespace("team-b").General("c", 4, 50).Obj(),
			`namespace "team-b" is over its qGPU quota for model "T4": memoryGiB used 10 + asked 4 > limit 12`},
		// A namespace without limits is not held.
		{builders.GPUPod("c1").Namespace("team-c").General("c", 2, 100).Obj(), ""},
	}
	for _, s := range steps {
		_, st := schedule(t, p, s.pod, t4Node("t4", 4, false))
		if s.want == "" {
			if !st.IsSuccess() {
				t.Fatalf("%s: %v, want placed", s.pod.Name, st)
			}
			continue
		}
		if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), s.want) {
			t.Fatalf("%s: %v %q, want UnschedulableAndUnresolvable with %q", s.pod.Name, st.Code(), st.Message(), s.want)
		}
	}
	var woken []string
	p.handle.(*fakeHandle).onActivate = func(keys []string) { woken = keys }
	p.shared.waiting.activate = p.handle.Activate
	p.shared.waiting.track(steps[2].pod)
	p.shared.release(klog.Background(), steps[0].pod)
	if diff := cmp.Diff([]string{"team-a/a3"}, woken); diff != "" {
		t.Errorf("pods woken when a1 ended (-want +got):\n%s", diff)
	}
	if _, st := schedule(t, p, steps[2].pod, t4Node("t4", 4, false)); !st.IsSuccess() {
		t.Fatalf("a3 after a1 ended: %v, want placed", st)
	}
}

// Over the limit on one model, a pod goes to another model's cards; with
// only the model over quota, every node names the limit in Filter.
func TestQuotaLeavesOutModelsOverLimit(t *testing.T) {
	p := newPlugin(t, nil)
	t4, v100 := t4Node("t4", 1, false), v100Node("v100", 1, false)
	p.setNodes(t4, v100)
	p.shared.quotaChanged(context.Background(), p.handle, quotaConfigMap(map[string]string{"a": "T4: {cards: 0}"}))
	pod := builders.GPUPod("p").Namespace("a").General("c", 2, 10).Obj()
	node, st := schedule(t, p, pod, t4, v100)
	if !st.IsSuccess() || node != "v100" {
		t.Fatalf("placed on %q (%v), want v100: the T4 is over quota", node, st)
	}
	cs := framework.NewCycleState()
	other := builders.GPUPod("q").Namespace("a").General("c", 2, 10).Obj()
	if _, st := p.PreFilter(context.Background(), cs, other, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	st = p.Filter(context.Background(), cs, other, nodeInfo(t4))
	want := `namespace "a" is over its qGPU quota for model "T4": cards used 0 + asked 0.1 > limit 0`
	if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != want {
		t.Fatalf("Filter on the T4: %v %q, want %q", st.Code(), st.Message(), want)
	}
}

// A limit over every model ("*") turns the pod away in PreFilter.
func TestQuotaAnyModelRejectsInPreFilter(t *testing.T) {
	p := newPlugin(t, nil)
	p.setNodes(t4Node("t4", 2, false))
	p.shared.quotaChanged(context.Background(), p.handle, quotaConfigMap(map[string]string{"a": `"*": {memoryGiB: 4}`}))
	if _, st := schedule(t, p, builders.GPUPod("p1").Namespace("a").General("c", 4, 10).Obj(), t4Node("t4", 2, false)); !st.IsSuccess() {
		t.Fatalf("p1: %v", st)
	}
	_, st := p.PreFilter(context.Background(), framework.NewCycleState(), builders.GPUPod("p2").Namespace("a").General("c", 1, 10).Obj(), nil)
	want := `namespace "a" is over its qGPU quota for model "*": memoryGiB used 4 + asked 1 > limit 4`
	if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != want {
		t.Fatalf("PreFilter: %v %q, want %q", st.Code(), st.Message(), want)
	}
}

// A broken entry keeps the last valid limits; raising a limit wakes the
// waiting pods, and an unchanged ConfigMap wakes none.
func TestQuotaConfigMapChanges(t *testing.T) {
	p := newPlugin(t, nil)
	p.setNodes(t4Node("t4", 1, false))
	wakes := 0
	p.handle.(*fakeHandle).onActivate = func([]string) { wakes++ }
	p.shared.waiting.activate = p.handle.Activate
	waiting := builders.GPUPod("w").Namespace("a").General("c", 1, 10).Obj()
	p.shared.waiting.track(waiting)
	ctx := context.Background()
	p.shared.quotaChanged(ctx, p.handle, quotaConfigMap(map[string]string{"a": "T4: {cards: 0}"}))
	p.shared.quotaChanged(ctx, p.handle, quotaConfigMap(map[string]string{"a": "T4: {cards: -3}"}))
	if _, st := schedule(t, p, waiting, t4Node("t4", 1, false)); st.IsSuccess() {
		t.Fatal("placed after a broken entry: the last valid limit (0 cards) must stand")
	}
	if wakes != 1 {
		t.Fatalf("%d wake-ups after a new limit and a broken entry, want 1", wakes)
	}
	p.shared.quotaChanged(ctx, p.handle, quotaConfigMap(map[string]string{"a": "T4: {cards: 1}"}))
	if wakes != 2 {
		t.Fatalf("%d wake-ups after the limit was raised, want 2", wakes)
	}
	if _, st := schedule(t, p, waiting, t4Node("t4", 1, false)); !st.IsSuccess() {
		t.Fatalf("after the limit was raised: %v", st)
	}
	p.shared.quotaChanged(ctx, p.handle, nil)
	if p.shared.quota.Limited("a") {
		t.Fatal("ConfigMap deleted: the namespace must have no limits")
	}
}

// Reserve checks the chosen cards once more: use the informer saw after
// PreFilter (a pod bound by someone else) can take the last room.
func TestQuotaReserveChecksAgain(t *testing.T) {
	p := newPlugin(t, nil)
	p.setNodes(t4Node("t4", 2, false))
	p.shared.quotaChanged(context.Background(), p.handle, quotaConfigMap(map[string]string{"a": "T4: {cards: 1}"}))
	pod := builders.GPUPod("p").Namespace("a").General("c", 2, 60).Obj()
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(context.Background(), cs, pod, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	p.shared.quota.Held("elsewhere", "a", []quota.SliceUse{{Model: "Tesla-T4", Use: quota.Use{Cores: 50}}})
	st := p.Reserve(context.Background(), cs, pod, "t4")
	if st.IsSuccess() || !strings.Contains(st.Message(), `cards used 0.5 + asked 0.6 > limit 1`) {
		t.Fatalf("Reserve: %v, want refused with the quota's reason", st)
	}
	if _, held := p.ledger.Holding(pod.UID); held {
		t.Fatal("a refused Reserve must hold nothing")
	}
}

// The plugin reads the limits from the qgpu-quota ConfigMap through its
// informer, and drops them when the ConfigMap goes.
func TestQuotaWatchesConfigMap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(cs, 0)
	pl, err := New(ctx, nil, &fakeHandle{cs: cs, factory: factory, profile: protocol.SchedulerName})
	if err != nil {
		t.Fatal(err)
	}
	p := pl.(*QGPU)
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		t.Fatal("informers did not sync")
	}
	cms := cs.CoreV1().ConfigMaps(quota.ConfigMapNamespace)
	if _, err := cms.Create(ctx, quotaConfigMap(map[string]string{"a": "T4: {cards: 1}"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return p.shared.quota.Limited("a") })
	if err := cms.Delete(ctx, quota.ConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return !p.shared.quota.Limited("a") })
}

// A node the pod does not fit for its own reasons keeps that reason, even
// when the namespace is over quota on its model: the quota's reason is
// only for nodes where the quota alone keeps the pod off.
func TestQuotaReasonOnlyWhereQuotaDecides(t *testing.T) {
	p := newPlugin(t, nil)
	t4, v100 := t4Node("t4", 1, false), v100Node("v100", 1, false)
	p.setNodes(t4, v100)
	p.shared.quotaChanged(context.Background(), p.handle, quotaConfigMap(map[string]string{"a": "T4: {cards: 0}"}))
	cases := []struct {
		name string
		pod  *v1.Pod
		node *v1.Node
		want string
	}{
		{"quota alone", builders.GPUPod("small").Namespace("a").General("c", 2, 10).Obj(), t4,
			`namespace "a" is over its qGPU quota for model "T4": cards used 0 + asked 0.1 > limit 0`},
		{"too big for the card anyway", builders.GPUPod("big").Namespace("a").General("c", 20, 10).Obj(), t4, placement.ReasonCardsFull},
		{"another model's node", builders.GPUPod("big2").Namespace("a").General("c", 40, 10).Obj(), v100, placement.ReasonCardsFull},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := framework.NewCycleState()
			if _, st := p.PreFilter(context.Background(), cs, c.pod, nil); !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			if st := p.Filter(context.Background(), cs, c.pod, nodeInfo(c.node)); st.Message() != c.want {
				t.Fatalf("Filter: %v %q, want %q", st.Code(), st.Message(), c.want)
			}
		})
	}
}
