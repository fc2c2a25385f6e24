package qgpu

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

var podsResource = v1.SchemeGroupVersion.WithResource("pods")

// bindFault is what the apiserver does with one binding call.
type bindFault struct {
	// err is the binding call's error.
	err error
	// written: the binding was written before err came back (the response lost).
	written bool
	// movedOn: another write moved the pod past the binding's version first,
	// so the binding's resourceVersion precondition failed.
	movedOn bool
	// deleted: the pod was deleted first.
	deleted bool
	// readErr, if set, is the error of every read of the pod; else reads see it.
	readErr error
}

// inject makes the plugin's clientset answer a binding of pod as f says.
// The pod is at resourceVersion 10 and moves to 11 with a write.
func (f bindFault) inject(t *testing.T, cs *fake.Clientset, pod *v1.Pod) {
	t.Helper()
	cs.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(clienttesting.CreateAction).GetObject().(*v1.Binding)
		if b.ResourceVersion != pod.ResourceVersion || b.UID != pod.UID {
			t.Errorf("binding preconditions: uid %q resourceVersion %q, want %q %q", b.UID, b.ResourceVersion, pod.UID, pod.ResourceVersion)
		}
		switch {
		case f.deleted:
			if err := cs.Tracker().Delete(podsResource, pod.Namespace, pod.Name); err != nil {
				t.Fatal(err)
			}
		case f.movedOn:
			moved := pod.DeepCopy()
			moved.ResourceVersion = "11"
			moved.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse}}
			if err := cs.Tracker().Update(podsResource, moved, pod.Namespace); err != nil {
				t.Fatal(err)
			}
		case f.written:
			bound := pod.DeepCopy()
			bound.ResourceVersion = "11"
			bound.Spec.NodeName = b.Target.Name
			for k, v := range b.Annotations {
				bound.Annotations[k] = v
			}
			if err := cs.Tracker().Update(podsResource, bound, pod.Namespace); err != nil {
				t.Fatal(err)
			}
		}
		return true, nil, f.err
	})
	if f.readErr != nil {
		cs.PrependReactor("get", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
			return a.(clienttesting.GetAction).GetName() == pod.Name, nil, f.readErr
		})
	}
}

// The apiserver's answers a binding call can end with.
var (
	errReset       = errors.New("read tcp 10.0.0.2:48812->10.0.0.1:6443: read: connection reset by peer")
	errInternal    = apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	errTimeout     = apierrors.NewTimeoutError("request did not complete within requested timeout", 0)
	errTooMany     = apierrors.NewTooManyRequests("too many requests", 1)
	errForbidden   = apierrors.NewForbidden(schema.GroupResource{Resource: "pods/binding"}, "a", errors.New("denied by policy"))
	errInvalid     = apierrors.NewInvalid(schema.GroupKind{Kind: "Binding"}, "a", nil)
	errConflict    = apierrors.NewConflict(schema.GroupResource{Resource: "pods/binding"}, "a", errors.New("Precondition failed"))
	errNotFound    = apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "a")
	errRefusedDial = errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
)

// quickReadBack paces Bind's read-back in milliseconds until the test
// ends: a read-back whose reads all fail takes about 3 s in production.
// Shortening the pace, not the context, leaves the first read, which
// decides most cases, to happen however slow the machine.
func quickReadBack(t *testing.T) {
	t.Helper()
	old := readBack
	readBack = wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: old.Steps}
	t.Cleanup(func() { readBack = old })
}

// uncertainSetup is pod a (10 GiB of a 14 GiB card) reserved on n1 and
// bound with fault, then unreserved as the framework does after a failed
// Bind; it returns whether Bind succeeded.
func uncertainSetup(t *testing.T, p *QGPU, a *v1.Pod, fault bindFault) bool {
	t.Helper()
	p.setNodes(t4Node("n1", 1, false))
	fault.inject(t, p.handle.ClientSet().(*fake.Clientset), a)
	state := reserveOn(t, p, a, "n1")
	quickReadBack(t)
	ok := p.Bind(context.Background(), state, a, "n1").IsSuccess()
	if !ok {
		p.Unreserve(context.Background(), state, a, "n1")
	}
	return ok
}

func podA() *v1.Pod {
	a := builders.GPUPod("a").General("c", 10, 50).Obj()
	a.ResourceVersion = "10"
	return a
}

// heldOn reports whether pod a holds its slices, and card 0's memory in use.
func heldOn(p *QGPU, a *v1.Pod) (bool, int64) {
	_, held := p.ledger.Holding(a.UID)
	n, _ := p.ledger.CopyNode("n1", nil)
	return held, n.Cards[0].UsedMemoryGiB
}

// placeB reports whether pod b, which fits only on memory pod a held, is placed.
func placeB(t *testing.T, p *QGPU) bool {
	t.Helper()
	_, st := schedule(t, p, builders.GPUPod("b").General("c", 10, 50).Obj(), t4Node("n1", 1, false))
	return st.IsSuccess()
}

// Issue 27, item 3: a binding call that ends without a definite answer may
// have been written; the framework's Unreserve after the failed Bind must
// not free the slices the pod may hold, or the next pod is placed on them.
// A definite refusal frees them, as does a read that shows the binding can
// no longer be written (the pod moved past the version the binding was
// conditioned on, or is gone).
func TestBindOutcome(t *testing.T) {
	tests := []struct {
		name     string
		fault    bindFault
		wantBind bool
		wantHeld bool
	}{
		{"written, connection reset", bindFault{err: errReset, written: true}, true, true},
		{"written, 500, reads fail", bindFault{err: errInternal, written: true, readErr: errRefusedDial}, false, true},
		{"500, read shows the pod at the binding's version", bindFault{err: errInternal}, false, true},
		{"timeout, reads fail", bindFault{err: errTimeout, readErr: errRefusedDial}, false, true},
		{"connection reset, read shows the pod at the binding's version", bindFault{err: errReset}, false, true},
		{"429, read shows the pod at the binding's version", bindFault{err: errTooMany}, false, true},
		// A 409 can hide a storage timeout (the pods/binding REST turns
		// every error of its own into a Conflict): with no evidence, unknown.
		{"409, reads fail", bindFault{err: errConflict, readErr: errRefusedDial}, false, true},
		{"500, the pod moved past the binding's version", bindFault{err: errInternal, movedOn: true}, false, false},
		{"409, the pod moved past the binding's version", bindFault{err: errConflict, movedOn: true}, false, false},
		{"timeout, pod deleted", bindFault{err: errTimeout, deleted: true}, false, false},
		{"403 refused", bindFault{err: errForbidden}, false, false},
		{"422 refused, reads fail", bindFault{err: errInvalid, readErr: errRefusedDial}, false, false},
		{"404 refused", bindFault{err: errNotFound, readErr: errNotFound}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := podA()
			p := newPlugin(t, nil, a)
			if got := uncertainSetup(t, p, a, tt.fault); got != tt.wantBind {
				t.Fatalf("Bind succeeded = %v, want %v", got, tt.wantBind)
			}
			held, used := heldOn(p, a)
			if held != tt.wantHeld || used != map[bool]int64{true: 10}[tt.wantHeld] {
				t.Fatalf("after Unreserve: pod a held = %v, card 0 uses %d GiB; want held = %v", held, used, tt.wantHeld)
			}
			if placed := placeB(t, p); placed == tt.wantHeld {
				t.Fatalf("pod b placed = %v; want %v (a's slices held = %v)", placed, !tt.wantHeld, tt.wantHeld)
			}
		})
	}
}

// A pod whose binding has an unknown outcome, retried by the scheduler,
// is not placed a second time: PreFilter turns it away (no preemption can
// help) until the informer shows what the binding did.
func TestBindUncertainPodIsNotPlacedAgain(t *testing.T) {
	a := podA()
	p := newPlugin(t, nil, a)
	uncertainSetup(t, p, a, bindFault{err: errTimeout, readErr: errRefusedDial})
	_, st := p.PreFilter(context.Background(), framework.NewCycleState(), a, nil)
	if st.Code() != fwk.UnschedulableAndUnresolvable {
		t.Fatalf("PreFilter of the bind-uncertain pod = %v, want UnschedulableAndUnresolvable", st)
	}
	if _, used := heldOn(p, a); used != 10 {
		t.Fatalf("card 0 uses %d GiB, want a's 10 once", used)
	}
}

// The informer settles a bind-uncertain holding: the pod seen bound makes it
// an ordinary bound holding (no overbooking, nothing freed); seen unbound at
// the binding's own version proves nothing; seen unbound at a newer version
// (the binding's precondition can no longer hold), or deleted, frees it.
func TestBindUncertainSettledByInformer(t *testing.T) {
	t.Run("bound", func(t *testing.T) {
		a := podA()
		rec := events.NewFakeRecorder(8)
		p := newPluginOn(t, &fakeHandle{cs: fake.NewClientset(), recorder: rec}, nil, a)
		over0 := overbookedCount(t, "memory")
		uncertainSetup(t, p, a, bindFault{err: errInternal, written: true, readErr: errRefusedDial})
		if placeB(t, p) {
			t.Fatal("pod b was placed on the memory of the bind-uncertain pod a")
		}
		bound, err := p.handle.ClientSet().(*fake.Clientset).Tracker().Get(podsResource, "default", "a")
		if err != nil {
			t.Fatal(err)
		}
		p.shared.observePod(context.Background(), bound.(*v1.Pod))
		if h, ok := p.ledger.Holding(a.UID); !ok || !h.Bound {
			t.Fatalf("after the informer showed a bound: holding %+v (held %v), want bound", h, ok)
		}
		if _, used := heldOn(p, a); used != 10 || placeB(t, p) {
			t.Fatalf("card 0 uses %d GiB (want 10), or b was placed beside a", used)
		}
		if len(rec.Events) != 0 || overbookedCount(t, "memory") != over0 {
			t.Fatalf("an ordinary bind was reported overbooked: %d events", len(rec.Events))
		}
	})
	t.Run("unbound", func(t *testing.T) {
		a := podA()
		p := newPlugin(t, nil, a)
		uncertainSetup(t, p, a, bindFault{err: errTimeout, readErr: errRefusedDial})
		p.shared.observePod(context.Background(), a.DeepCopy())
		if held, _ := heldOn(p, a); !held {
			t.Fatal("pod a seen unbound at the binding's own version freed its slices: the binding may still be written")
		}
		later := a.DeepCopy()
		later.ResourceVersion = "11"
		p.shared.observePod(context.Background(), later)
		if held, used := heldOn(p, a); held || used != 0 {
			t.Fatalf("pod a seen unbound at a newer version: held = %v, card 0 uses %d GiB; want freed", held, used)
		}
		if _, st := p.PreFilter(context.Background(), framework.NewCycleState(), later, nil); !st.IsSuccess() {
			t.Fatalf("PreFilter of the settled pod: %v", st)
		}
		if !placeB(t, p) {
			t.Fatal("pod b was not placed on the freed memory")
		}
	})
	t.Run("deleted", func(t *testing.T) {
		a := podA()
		p := newPlugin(t, nil, a)
		uncertainSetup(t, p, a, bindFault{err: errTimeout, readErr: errRefusedDial})
		p.shared.release(klog.Background(), a)
		if held, used := heldOn(p, a); held || used != 0 {
			t.Fatalf("deleted pod a: held = %v, card 0 uses %d GiB; want freed", held, used)
		}
	})
}

// The informer's handler may see the pod at a newer version before Bind
// marks its holding uncertain, when there is nothing for it to free; Bind
// then settles the holding against the informer's cache itself.
func TestBindUncertainSettledByTheCache(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := podA()
	cs := fake.NewClientset(t4Node("n1", 1, false), a)
	factory := informers.NewSharedInformerFactory(cs, 0)
	pl, err := New(ctx, nil, &fakeHandle{cs: cs, factory: factory, profile: protocol.SchedulerName})
	if err != nil {
		t.Fatal(err)
	}
	p := pl.(*QGPU)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	waitFor(t, func() bool { return p.ledger.HasCards("n1") })
	state := reserveOn(t, p, a, "n1")
	// The framework's status patch after an earlier failure, say: the
	// binding's version precondition can no longer hold.
	moved := a.DeepCopy()
	moved.ResourceVersion = "11"
	if err := cs.Tracker().Update(podsResource, moved, "default"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		p.shared.waiting.mu.Lock()
		defer p.shared.waiting.mu.Unlock()
		w, ok := p.shared.waiting.pods["default/a"]
		return ok && w.pod.ResourceVersion == "11"
	})
	bindFault{err: errTimeout, readErr: errRefusedDial}.inject(t, cs, a)
	quickReadBack(t)
	if p.Bind(ctx, state, a, "n1").IsSuccess() {
		t.Fatal("Bind succeeded")
	}
	p.Unreserve(ctx, state, a, "n1")
	if held, used := heldOn(p, a); held || used != 0 {
		t.Fatalf("pod a, cached at a newer version than its binding's: held = %v, card 0 uses %d GiB; want freed", held, used)
	}
}
