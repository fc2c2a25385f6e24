package qgpu

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/args"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// reserveOn runs PreFilter and Reserve of pod on node, as a cycle would.
func reserveOn(t *testing.T, p *QGPU, pod *v1.Pod, node string) fwk.CycleState {
	t.Helper()
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(context.Background(), cs, pod, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	if st := p.Reserve(context.Background(), cs, pod, node); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	return cs
}

// boundWithAssignment is pod as the informer delivers it once its binding
// (with the assignment Reserve decided) was persisted.
func boundWithAssignment(t *testing.T, p *QGPU, cs fwk.CycleState, pod *v1.Pod, node string) *v1.Pod {
	t.Helper()
	s, err := readState(cs)
	if err != nil {
		t.Fatal(err)
	}
	value, err := encodeAssignment(s, pod, node)
	if err != nil {
		t.Fatal(err)
	}
	bound := pod.DeepCopy()
	bound.Spec.NodeName = node
	bound.Annotations[protocol.AnnotationAssignment] = value
	return bound
}

// Regression (issue 13, case 1): a bind that fails after the apiserver
// persisted it. The informer confirms the pod bound before the framework
// calls Unreserve; Unreserve must not free what the pod really holds, or the
// next pod is placed on the same memory.
func TestUnreserveKeepsWhatTheInformerConfirmed(t *testing.T) {
	for _, refusedReserve := range []bool{false, true} {
		name := map[bool]string{false: "bind error after the write", true: "Reserve refused, then Unreserve"}[refusedReserve]
		t.Run(name, func(t *testing.T) {
			p := newPlugin(t, nil)
			n := t4Node("n1", 1, false)
			p.setNodes(n)
			a := builders.GPUPod("a").General("c", 10, 50).Obj()
			cs := reserveOn(t, p, a, "n1")
			p.shared.observePod(context.Background(), boundWithAssignment(t, p, cs, a, "n1"))
			if refusedReserve {
				// The pod was retried after the bind error; Reserve finds its
				// holding and refuses, and the framework unreserves that node.
				cs = framework.NewCycleState()
				p.PreFilter(context.Background(), cs, a, nil)
				if st := p.Reserve(context.Background(), cs, a, "n1"); st.IsSuccess() {
					t.Fatal("Reserve of a pod that holds slices succeeded")
				}
			}
			p.Unreserve(context.Background(), cs, a, "n1")
			if h, ok := p.ledger.Holding(a.UID); !ok || !h.Bound {
				t.Fatalf("after Unreserve pod a holds %+v (held %v), want its bound slices", h, ok)
			}
			b := builders.GPUPod("b").General("c", 10, 50).Obj()
			if node, st := schedule(t, p, b, n); st.IsSuccess() {
				t.Fatalf("pod b was placed on %s, on the memory pod a holds", node)
			}
		})
	}
}

// Regression (issue 13, case 2): a node hint replayed with a stale Node must
// not write it over the one the informer handler applied.
func TestNodeHintDoesNotWriteStaleNode(t *testing.T) {
	p := newPlugin(t, nil)
	v0 := t4Node("n1", 2, false)
	v1n := t4Node("n1", 2, true) // made mixed: a change that may add room
	v2 := builders.GPUNode("n1", false, unhealthy(builders.Cards(2, "Tesla-T4", 15109), 0))
	p.shared.nodeChanged(context.Background(), p.handle, nil, v0)
	p.shared.nodeChanged(context.Background(), p.handle, v1n, v2)
	pending := builders.GPUPod("pending").General("c", 4, 10).Obj()
	if hint, err := p.isSchedulableAfterNodeChange(klog.Background(), pending, v0, v1n); err != nil || hint != fwk.Queue {
		t.Fatalf("hint = %v, %v; want Queue", hint, err)
	}
	got, _ := p.ledger.CopyNode("n1", nil)
	if got.Mixed || got.Cards[0].Healthy {
		t.Fatalf("after a stale hint the ledger has mixed=%v, card 0 healthy=%v; want the handler's v2 (not mixed, card 0 unhealthy)", got.Mixed, got.Cards[0].Healthy)
	}
}

func unhealthy(cards []protocol.Card, i int) []protocol.Card {
	cards[i].Healthy = false
	return cards
}

// Regression (issue 13, case 3): kube-scheduler sends an assigned-pod delete
// event with the assumed pod when a bind fails; replayed later, it must not
// free the pod's newer holding on another node.
func TestPodDeleteHintDoesNotFreeNewerHolding(t *testing.T) {
	p := newPlugin(t, nil)
	p.setNodes(t4Node("n1", 1, false), t4Node("n2", 1, false))
	a := builders.GPUPod("a").General("c", 10, 50).Obj()
	cs := reserveOn(t, p, a, "n2")
	p.shared.observePod(context.Background(), boundWithAssignment(t, p, cs, a, "n2"))
	stale := a.DeepCopy()
	stale.Spec.NodeName = "n1" // the assumed pod of the failed bind
	pending := builders.GPUPod("pending").General("c", 8, 50).Obj()
	if hint, _ := p.isSchedulableAfterPodDeleted(klog.Background(), pending, stale, nil); hint != fwk.Queue {
		t.Fatalf("hint = %v, want Queue", hint)
	}
	if h, ok := p.ledger.Holding(a.UID); !ok || h.Node != "n2" {
		t.Fatalf("pod a holds %+v (held %v), want its slices on n2", h, ok)
	}
	if c, _ := p.ledger.CopyNode("n2", nil); c.Cards[0].UsedMemoryGiB != 10 {
		t.Fatalf("n2 card 0 uses %d GiB, want 10", c.Cards[0].UsedMemoryGiB)
	}
}

// Regression (issue 13, case 5): a pending pod's own edit of its class or
// model filters requeues it; other pods' updates do not.
func TestPodUpdateHint(t *testing.T) {
	p := newPlugin(t, nil)
	registered := false
	events, _ := p.EventsToRegister(context.Background())
	for _, e := range events {
		registered = registered || (e.Event.Resource == fwk.Pod && e.Event.ActionType&fwk.Update == fwk.Update)
	}
	if !registered {
		t.Fatal("no Pod/Update event registered: an edited pending pod waits for the queue's flush")
	}
	pending := builders.GPUPod("pending").Online("c", 4).Obj()
	offline := builders.GPUPod("pending").Offline("c", 4, 50).Obj()
	typed := pending.DeepCopy()
	typed.Annotations[protocol.AnnotationUseGPUType] = "V100"
	labelled := pending.DeepCopy()
	labelled.Labels = map[string]string{"app": "x"}
	other := builders.GPUPod("other").Online("c", 4).Obj()
	other.UID = "uid-other"
	otherTyped := other.DeepCopy()
	otherTyped.Annotations[protocol.AnnotationUseGPUType] = "V100"
	tests := []struct {
		name     string
		old, new *v1.Pod
		want     fwk.QueueingHint
	}{
		{"class changed", pending, offline, fwk.Queue},
		{"model filter added", pending, typed, fwk.Queue},
		{"label only", pending, labelled, fwk.QueueSkip},
		{"another pod edited", other, otherTyped, fwk.QueueSkip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.isSchedulableAfterPodUpdate(klog.Background(), pending, tt.old, tt.new)
			if err != nil || got != tt.want {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// Regression (issue 13, case 4): the profiles of one scheduler process share
// one ledger, so two profiles never book the same card twice.
func TestProfilesShareOneLedger(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(cs, 0)
	binpack := &args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack"}
	spread := &args.QGPUArgs{NodePolicy: "spread", CardPolicy: "spread"}
	pl1, err := New(ctx, binpack, &fakeHandle{cs: cs, factory: factory, profile: "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	pl2, err := New(ctx, spread, &fakeHandle{cs: cs, factory: factory, profile: "team-b"})
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := pl1.(*QGPU), pl2.(*QGPU)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	n := t4Node("n1", 1, false)
	p1.setNodes(n)
	reserveOn(t, p1, builders.GPUPod("a").General("c", 10, 50).Obj(), "n1")
	if node, st := schedule(t, p2, builders.GPUPod("b").General("c", 10, 50).Obj(), n); st.IsSuccess() {
		t.Fatalf("the second profile placed pod b on %s, on the memory the first profile reserved", node)
	}

	other := &args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack", MaxPodsPerCard: 2}
	_, err = New(ctx, other, &fakeHandle{cs: cs, factory: factory, profile: "team-c"})
	if err == nil || !strings.Contains(err.Error(), "maxPodsPerCard") || !strings.Contains(err.Error(), "2") {
		t.Fatalf("a profile with another maxPodsPerCard: err = %v, want one naming maxPodsPerCard and its value", err)
	}
}

// The informer handlers, once they have freed slices or read a node that
// adds room, activate the pods waiting for qGPU room: the queue may have
// retried them before the ledger changed.
func TestHandlersWakeWaitingPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := boundPod("held", "n1", "uid-held", protocol.Slice{Index: 0, UUID: "GPU-Tesla-T4-00", MemoryGiB: 10, Cores: 50})
	waiting := builders.GPUPod("waiting").General("c", 8, 50).Obj()
	online := builders.GPUPod("online").Online("c", 4).Obj()
	online.UID = "uid-online"
	plain := builders.GPUPod("plain").Container("c", nil).Obj()
	plain.UID = "uid-plain"
	cs := fake.NewClientset(t4Node("n1", 1, false), held, waiting, online, plain)
	factory := informers.NewSharedInformerFactory(cs, 0)
	// What the ledger held when the pods were activated.
	type activation struct {
		pods  []string
		held  bool
		cards int
	}
	activated := make(chan activation, 16)
	var p *QGPU
	h := &fakeHandle{cs: cs, factory: factory, profile: protocol.SchedulerName, onActivate: func(pods []string) {
		_, held := p.ledger.Holding("uid-held")
		n, _ := p.ledger.CopyNode("n1", nil)
		activated <- activation{pods, held, len(n.Cards)}
	}}
	pl, err := New(ctx, nil, h)
	if err != nil {
		t.Fatal(err)
	}
	p = pl.(*QGPU)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	if err := cs.CoreV1().Pods("default").Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := activation{[]string{"default/online", "default/waiting"}, false, 1}
	if got := awaitActivation(t, activated, want); !cmp.Equal(got, want, cmp.Exporter(func(reflect.Type) bool { return true })) {
		t.Fatalf("after a delete: activated %+v, want %+v", got, want)
	}

	// A new card on a node that is not mixed helps the general pod only.
	if _, err := cs.CoreV1().Nodes().Update(ctx, t4Node("n1", 2, false), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want = activation{[]string{"default/waiting"}, false, 2}
	if got := awaitActivation(t, activated, want); !cmp.Equal(got, want, cmp.Exporter(func(reflect.Type) bool { return true })) {
		t.Fatalf("after a node grew: activated %+v, want %+v", got, want)
	}
}

// awaitActivation returns the first activation equal to want, or the last
// one seen (the start-up's own activations come first) when none is in a
// minute (only a failing test waits it out).
func awaitActivation[T any](t *testing.T, c chan T, want T) T {
	t.Helper()
	var last T
	timeout := time.After(time.Minute)
	for {
		select {
		case got := <-c:
			if cmp.Equal(got, want, cmp.Exporter(func(reflect.Type) bool { return true })) {
				return got
			}
			last = got
		case <-timeout:
			return last
		}
	}
}
