package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/agent/nvml/fakespec"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// placed is a general pod bound to node with one slice on card as its
// assignment; grantCard ≥ 0 adds the agent's grant of that card.
func placed(name, node string, gib, cores int64, card, grantCard int) *corev1.Pod {
	p := builders.GPUPod(name).General("c", gib, cores).Obj()
	p.UID = types.UID("uid-" + name)
	p.Spec.NodeName = node
	slice := func(i int) protocol.Assignment {
		return protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(p.UID), Node: node, Class: protocol.ClassGeneral,
			Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{{Index: i, UUID: fakespec.UUID(node, i), MemoryGiB: gib, Cores: cores}}}}}
	}
	a := slice(card)
	p.Annotations[protocol.AnnotationAssignment], _ = a.Encode()
	if grantCard >= 0 {
		g := slice(grantCard)
		p.Annotations[protocol.AnnotationGrant], _ = g.Encode()
	}
	return p
}

// The observer sees a card over capacity at the moment it happens, by
// assignments or by grants, even when the pods are gone by the end; its
// capacity is the node spec's, not the (rewritten) inventory.
func TestObserverPeak(t *testing.T) {
	type step struct {
		old, obj *corev1.Pod
		now      int // cards over capacity after the step
	}
	a := placed("a", "t4", 10, 30, 0, 0)
	b := placed("b", "t4", 10, 30, 0, 0)        // 20 GiB on a 14 GiB card
	c := placed("c", "t4", 10, 30, 1, 0)        // assigned card 1, granted card 0
	c1 := placed("c", "t4", 10, 30, 1, 1)       // granted as assigned
	d := placed("d", "t4", 4, 80, 1, 1)         // 110 cores with c1
	other := placed("e", "other", 10, 30, 0, 0) // not a node of the run
	done := b.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	twinA := placed("ta", "t4", 10, 30, 0, -1) // assigned card 0, not admitted yet
	twinB := placed("tb", "t4", 10, 30, 1, 0)  // took twin A's card
	twinA1 := placed("ta", "t4", 10, 30, 0, 1) // then A got B's
	failed := b.DeepCopy()
	failed.Status.Phase = corev1.PodFailed
	onB := placed("f", "t4-b", 10, 30, 0, 0)
	onB2 := placed("g", "t4-b", 10, 30, 0, 0)
	deleting := b.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	unbound := b.DeepCopy()
	unbound.Spec.NodeName = ""
	tests := []struct {
		name  string
		steps []step
		peak  int
	}{
		{"fits", []step{{nil, a, 0}}, 0},
		{"second pod over memory, deleted a moment later", []step{{nil, a, 0}, {nil, b, 1}, {b, nil, 0}}, 1},
		{"a pod being deleted still holds", []step{{nil, a, 0}, {nil, deleting, 1}}, 1},
		{"a terminal pod frees its slices", []step{{nil, a, 0}, {nil, b, 1}, {b, done, 0}}, 1},
		{"a failed pod frees its slices", []step{{nil, a, 0}, {nil, b, 1}, {b, failed, 0}}, 1},
		{"cards of two nodes over at one moment", []step{{nil, a, 0}, {nil, b, 1}, {nil, onB, 1}, {nil, onB2, 2}, {b, nil, 1}}, 2},
		{"a pod not bound holds nothing", []step{{nil, a, 0}, {nil, unbound, 0}}, 0},
		{"grant on another card than assigned", []step{{nil, a, 0}, {nil, c, 1}, {c, c1, 0}}, 1},
		{"twins admitted out of order: no container on a card twice", []step{{nil, twinA, 0}, {nil, twinB, 0}, {twinA, twinA1, 0}}, 0},
		{"cores over 100", []step{{nil, c1, 0}, {nil, d, 1}}, 1},
		{"two cards at once", []step{{nil, a, 0}, {nil, b, 1}, {nil, c1, 1}, {nil, d, 2}, {b, nil, 1}}, 2},
		{"pods of unknown nodes are not judged", []step{{nil, other, 0}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := newObserver([]harness.NodeSpec{{Name: "t4", Cards: "2xT4"}, {Name: "t4-b", Cards: "1xT4"}})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.steps {
				var old, obj any
				if s.old != nil {
					old = s.old
				}
				if s.obj != nil {
					obj = s.obj
				}
				o.podChanged(old, obj)
				if o.now != s.now {
					t.Fatalf("step %d: %d cards over capacity, want %d (%v)", i, o.now, s.now, o.shown)
				}
			}
			if o.peak != tt.peak {
				t.Errorf("peak %d, want %d", o.peak, tt.peak)
			}
		})
	}
}

func TestObserverRefusesBadSpec(t *testing.T) {
	if _, err := newObserver([]harness.NodeSpec{{Name: "n", Cards: "2xNoSuchCard"}}); err == nil {
		t.Fatal("want an error for an unknown card model")
	}
}

// Settling waits for the agent's grant of every pod that holds slices, and
// not for pods that ended (an admission the kubelet refused leaves a failed
// pod without a grant).
func TestObserverWaitsForGrants(t *testing.T) {
	o, err := newObserver([]harness.NodeSpec{{Name: "t4", Cards: "2xT4"}})
	if err != nil {
		t.Fatal(err)
	}
	pending := placed("a", "t4", 4, 30, 0, -1) // assigned, not granted yet
	o.podChanged(nil, pending)
	if n := o.ungranted(); n != 1 {
		t.Fatalf("%d pods waiting for a grant, want 1", n)
	}
	for _, phase := range []corev1.PodPhase{corev1.PodFailed, corev1.PodSucceeded} {
		ended := pending.DeepCopy()
		ended.Status.Phase = phase
		o.podChanged(pending, ended)
		if n := o.ungranted(); n != 0 {
			t.Errorf("%s: %d pods waiting for a grant, want 0", phase, n)
		}
		o.podChanged(ended, pending)
	}
	o.podChanged(pending, placed("a", "t4", 4, 30, 0, 0))
	if n := o.ungranted(); n != 0 {
		t.Errorf("granted: %d pods waiting, want 0", n)
	}
}

// At a node's first instant over capacity the observer lists the node's
// pods with their assignments and grants, once per node.
func TestObserverListsPodsOnce(t *testing.T) {
	o, err := newObserver([]harness.NodeSpec{{Name: "t4", Cards: "2xT4"}})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := placed("a", "t4", 10, 30, 0, 0), placed("b", "t4", 10, 30, 0, -1), placed("c", "t4", 2, 30, 0, -1)
	for _, p := range []*corev1.Pod{a, b, c} {
		o.podChanged(nil, p)
	}
	var pods []string
	for _, s := range o.shown {
		if strings.HasPrefix(s, "    ") {
			pods = append(pods, s)
		}
	}
	if len(o.shown) != 2+2 || len(pods) != 2 {
		t.Fatalf("shown %q: want two instants and the two pods of the first", o.shown)
	}
	if !strings.Contains(pods[0], "a uid uid-a") || !strings.Contains(pods[0], "granted [general uid uid-a; c: card0 10GiB 30c]") ||
		!strings.Contains(pods[1], "b uid uid-b") || !strings.Contains(pods[1], "granted [none]") {
		t.Errorf("pod lines %q", pods)
	}
}
