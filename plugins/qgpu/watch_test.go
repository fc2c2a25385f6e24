package qgpu

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// boundPod is a pod bound to node with the scheduler's assignment on it.
func boundPod(name, node string, uid types.UID, slice protocol.Slice) *v1.Pod {
	pod := builders.GPUPod(name).General("c", slice.MemoryGiB, slice.Cores).Obj()
	pod.UID = uid
	pod.Spec.NodeName = node
	a := protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(uid), Node: node, Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{slice}}}}
	pod.Annotations[protocol.AnnotationAssignment], _ = a.Encode()
	return pod
}

// The ledger is rebuilt from the assignments of bound pods; assignments not
// made for the pod (forged) are ignored; deleted pods free their slices.
func TestWatchRebuildsLedger(t *testing.T) {
	ctx := context.Background()
	slice := protocol.Slice{Index: 0, UUID: "GPU-Tesla-T4-00", MemoryGiB: 4, Cores: 40}
	good := boundPod("good", "n1", "uid-good", slice)
	forged := boundPod("forged", "n1", "uid-forged", slice)
	forged.UID = "uid-other" // the annotation names another pod's UID
	p, cs := liveWorld(t, t4Node("n1", 1, false), good, forged)
	waitFor(t, func() bool {
		n, _ := p.ledger.CopyNode("n1", nil)
		return len(n.Cards) == 1 && n.Cards[0].UsedMemoryGiB == 4
	})
	if _, ok := p.ledger.Holding("uid-other"); ok {
		t.Fatal("forged assignment was recorded")
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, "good", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		n, _ := p.ledger.CopyNode("n1", nil)
		return n.Cards[0].UsedMemoryGiB == 0 && n.Cards[0].Pods() == 0
	})
}

// The watch's other release paths: a pod that terminates frees its slices
// while its object stays; an assignment made for another node than the one
// the pod is bound to is not recorded; a deleted node leaves the ledger.
func TestWatchReleasePaths(t *testing.T) {
	slice := protocol.Slice{Index: 0, UUID: "GPU-Tesla-T4-00", MemoryGiB: 4, Cores: 40}
	used := func(p *QGPU) int64 {
		n, _ := p.ledger.CopyNode("n1", nil)
		if len(n.Cards) == 0 {
			return -1
		}
		return n.Cards[0].UsedMemoryGiB
	}
	start := func(t *testing.T, objs ...runtime.Object) (*QGPU, *fake.Clientset) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		cs := fake.NewClientset(objs...)
		factory := informers.NewSharedInformerFactory(cs, 0)
		pl, err := New(ctx, nil, &fakeHandle{cs: cs, factory: factory})
		if err != nil {
			t.Fatal(err)
		}
		factory.Start(ctx.Done())
		return pl.(*QGPU), cs
	}
	t.Run("terminal pod frees its slices", func(t *testing.T) {
		pod := boundPod("done", "n1", "uid-done", slice)
		p, cs := start(t, t4Node("n1", 1, false), pod)
		waitFor(t, func() bool { return used(p) == 4 })
		pod = pod.DeepCopy()
		pod.Status.Phase = v1.PodSucceeded
		if _, err := cs.CoreV1().Pods("default").UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return used(p) == 0 })
		if _, ok := p.ledger.Holding("uid-done"); ok {
			t.Error("the terminated pod still holds")
		}
	})
	t.Run("assignment for another node is ignored", func(t *testing.T) {
		moved := boundPod("moved", "n2", "uid-moved", slice) // assignment names n2
		moved.Spec.NodeName = "n1"
		good := boundPod("good", "n1", "uid-good", protocol.Slice{Index: 0, UUID: slice.UUID, MemoryGiB: 1, Cores: 1})
		p, _ := start(t, t4Node("n1", 1, false), t4Node("n2", 1, false), moved, good)
		waitFor(t, func() bool { return used(p) == 1 }) // good seen: the informer has synced
		if h, ok := p.ledger.Holding("uid-moved"); ok {
			t.Errorf("an assignment for n2 on a pod bound to n1 was recorded: %+v", h)
		}
	})
	t.Run("deleted node leaves the ledger", func(t *testing.T) {
		p, cs := start(t, t4Node("n1", 1, false))
		waitFor(t, func() bool { return used(p) == 0 })
		if err := cs.CoreV1().Nodes().Delete(context.Background(), "n1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			n, known := p.ledger.CopyNode("n1", nil)
			return !known && len(n.Cards) == 0
		})
	})
}

// waitFor polls cond for up to a minute: only a failing test waits it out.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, time.Minute, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatal("condition not met in a minute")
	}
}

func TestQueueingHints(t *testing.T) {
	p := newPlugin(t, nil)
	logger := klog.Background()
	pending := builders.GPUPod("pending").Online("c", 4).Obj()
	held := boundPod("held", "n1", "uid-held", protocol.Slice{Index: 0, UUID: "u", MemoryGiB: 1, Cores: 1})
	unbound := builders.GPUPod("unbound").General("c", 1, 1).Obj()
	mixed, plainGPU := t4Node("n1", 1, true), t4Node("n1", 1, false)
	notGPU := t4Node("n1", 1, true)
	notGPU.Labels = map[string]string{}
	grown := t4Node("n1", 2, true)
	foreign := builders.GPUPod("foreign").General("c", 4, 10).Obj()
	foreign.Spec.NodeName = "n1"
	plain := builders.GPUPod("plain").Container("c", nil).Obj()
	plain.Spec.NodeName = "n1"
	wholeGPU := builders.GPUPod("whole-gpu").Container("c", map[string]int64{"nvidia.com/gpu": 1}).Obj()
	wholeGPU.Spec.NodeName = "n1"
	pluginsGone := mixed.DeepCopy()
	pluginsGone.Status.Allocatable = v1.ResourceList{v1.ResourceCPU: resource.MustParse("8")}
	tests := []struct {
		name     string
		fn       fwk.QueueingHintFn
		old, new any
		want     fwk.QueueingHint
	}{
		{"qGPU pod deleted from a node", p.isSchedulableAfterPodDeleted, held, nil, fwk.Queue},
		{"unbound pod deleted", p.isSchedulableAfterPodDeleted, unbound, nil, fwk.QueueSkip},
		{"pod without assignment deleted", p.isSchedulableAfterPodDeleted, builders.GPUPod("x").Container("c", nil).Obj(), nil, fwk.QueueSkip},
		{"bound pod without assignment asking for qGPU deleted", p.isSchedulableAfterPodDeleted, foreign, nil, fwk.Queue},
		{"bound pod asking for no qGPU deleted", p.isSchedulableAfterPodDeleted, plain, nil, fwk.QueueSkip},
		// It kept node-exclusive pods off its node (docs/node-exclusive.md).
		{"bound pod asking for nvidia.com/gpu deleted", p.isSchedulableAfterPodDeleted, wholeGPU, nil, fwk.Queue},
		{"new mixed qGPU node", p.isSchedulableAfterNodeChange, nil, mixed, fwk.Queue},
		{"device plugins registered again", p.isSchedulableAfterNodeChange, pluginsGone, mixed, fwk.Queue},
		{"device plugins gone", p.isSchedulableAfterNodeChange, mixed, pluginsGone, fwk.QueueSkip},
		{"new node without the label", p.isSchedulableAfterNodeChange, nil, notGPU, fwk.QueueSkip},
		{"online pod, node not mixed", p.isSchedulableAfterNodeChange, nil, plainGPU, fwk.QueueSkip},
		{"inventory unchanged", p.isSchedulableAfterNodeChange, mixed, mixed.DeepCopy(), fwk.QueueSkip},
		{"inventory grew", p.isSchedulableAfterNodeChange, mixed, grown, fwk.Queue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.fn(logger, pending, tt.old, tt.new)
			if err != nil || got != tt.want {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
