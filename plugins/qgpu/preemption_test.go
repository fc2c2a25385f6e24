package qgpu

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/test/builders"
)

func podInfo(t *testing.T, p *v1.Pod) *framework.PodInfo {
	pi, err := framework.NewPodInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

// A high-priority online pod fits a full card only once the offline pods on
// it are (simulated as) removed, and only if removing them is enough.
func TestPreemptionExtensions(t *testing.T) {
	p := newPlugin(t, nil)
	n := t4Node("n1", 1, true) // one 14 GiB card, 3 pods at most
	p.setNodes(n)
	var victims []*v1.Pod
	for _, name := range []string{"off-a", "off-b", "off-c"} {
		pod := builders.GPUPod(name).Offline("c", 4, 30).Obj()
		if _, st := schedule(t, p, pod, n); st != nil {
			t.Fatal(st)
		}
		victims = append(victims, pod)
	}
	ctx := context.Background()
	online := builders.GPUPod("online").Online("c", 7).Priority(1000).Obj()
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs, online, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	ni := nodeInfo(n)
	if st := p.Filter(ctx, cs, online, ni); st.IsSuccess() {
		t.Fatal("fits a full card")
	}
	// The evaluator works on a clone: removing one victim leaves 6 GiB free (7 needed).
	sim := cs.Clone()
	if st := p.RemovePod(ctx, sim, online, podInfo(t, victims[0]), ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, sim, online, ni); st.IsSuccess() {
		t.Fatal("fits after removing one victim: 6 GiB free, 7 needed")
	}
	if st := p.RemovePod(ctx, sim, online, podInfo(t, victims[1]), ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, sim, online, ni); !st.IsSuccess() {
		t.Fatalf("does not fit after removing two victims: %v", st)
	}
	// Reprieve: adding a victim back makes it not fit again.
	if st := p.AddPod(ctx, sim, online, podInfo(t, victims[1]), ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, sim, online, ni); st.IsSuccess() {
		t.Fatal("fits after re-adding a victim")
	}
	// The original state never saw the simulation.
	if st := p.Filter(ctx, cs, online, ni); st.IsSuccess() {
		t.Fatal("simulation leaked into the original cycle state")
	}
}

// A nominated pod that is not in the ledger yet takes its room in the simulation.
func TestAddPodOfNominatedPod(t *testing.T) {
	p := newPlugin(t, nil)
	n := t4Node("n1", 1, false)
	p.setNodes(n)
	ctx := context.Background()
	pod := builders.GPUPod("p").General("c", 8, 50).Obj()
	cs := framework.NewCycleState()
	p.PreFilter(ctx, cs, pod, nil)
	ni := nodeInfo(n)
	if st := p.Filter(ctx, cs, pod, ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	nominated := builders.GPUPod("nominated").General("c", 8, 50).Obj()
	if st := p.AddPod(ctx, cs, pod, podInfo(t, nominated), ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, cs, pod, ni); st.IsSuccess() {
		t.Fatal("fits although the nominated pod took 8 of 14 GiB")
	}
}
