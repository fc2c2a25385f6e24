package qgpu

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/args"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// Every placement policy is accepted by the args validation, and nothing else.
func TestArgsAcceptEveryPolicy(t *testing.T) {
	tests := []struct {
		policy string
		valid  bool
	}{{"nope", false}, {"", false}, {"FGD", false}}
	for _, p := range placement.Policies {
		tests = append(tests, struct {
			policy string
			valid  bool
		}{string(p), true})
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			a := &args.QGPUArgs{NodePolicy: tt.policy, CardPolicy: tt.policy}
			errs := args.Validate(field.NewPath("args"), a)
			if got := len(errs) == 0; got != tt.valid {
				t.Errorf("Validate(%q) = %v, want valid %v", tt.policy, errs, tt.valid)
			}
			if got := placement.Policy(tt.policy).Valid(); got != tt.valid {
				t.Errorf("Policy(%q).Valid() = %v, want %v", tt.policy, got, tt.valid)
			}
		})
	}
}

// fragfit learns the workload from the pods it places and then fills the
// node whose fragmentation grows least.
func TestFragFitLearnsWorkload(t *testing.T) {
	p := newPlugin(t, &args.QGPUArgs{NodePolicy: "fragfit", CardPolicy: "fragfit"})
	if p.workload.Load() != nil {
		t.Fatal("workload before any pod")
	}
	n := v100Node("n1", 2, false)
	p.setNodes(n)
	var got []string
	for i, size := range []int64{8, 8, 16} {
		pod := builders.GPUPod(fmt.Sprintf("p%d", i)).General("c", size, 25).Obj()
		node, st := schedule(t, p, pod, n)
		if node == "" {
			t.Fatalf("pod %d: %v", i, st)
		}
		got = append(got, node)
	}
	if diff := cmp.Diff([]string{"n1", "n1", "n1"}, got); diff != "" {
		t.Error(diff)
	}
	if w := p.workload.Load(); w == nil || w.Len() != 2 {
		t.Fatalf("learned workload %v, want 2 shapes", w)
	}
}

// Score answers from Filter's stash what it computes without one, for every
// policy, class and size, on nodes filled by earlier pods.
func TestStashedScoreIsScore(t *testing.T) {
	ctx := context.Background()
	for _, policy := range placement.Policies {
		t.Run(string(policy), func(t *testing.T) {
			p := newPlugin(t, &args.QGPUArgs{NodePolicy: string(policy), CardPolicy: string(policy)})
			nodes := []*v1.Node{v100Node("a", 2, true), v100Node("b", 4, false), t4Node("c", 2, true)}
			p.setNodes(nodes...)
			for i := range 24 {
				pod := benchMix(i)
				cs := framework.NewCycleState()
				if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
					t.Fatal(st)
				}
				for _, n := range nodes {
					ni := nodeInfo(n)
					if !p.Filter(ctx, cs, pod, ni).IsSuccess() {
						continue
					}
					stashed, _ := p.Score(ctx, cs, pod, ni)
					fresh := framework.NewCycleState()
					p.PreFilter(ctx, fresh, pod, nil)
					if got, _ := p.Score(ctx, fresh, pod, ni); got != stashed {
						t.Fatalf("pod %d on %s: stashed score %d, computed %d", i, n.Name, stashed, got)
					}
				}
				schedule(t, p, pod, nodes...)
			}
		})
	}
}

// benchMix is a pod of each class and several sizes, by i.
func benchMix(i int) *v1.Pod {
	b := builders.GPUPod(fmt.Sprintf("p%d", i))
	mem := []int64{2, 4, 6, 8}[i%4]
	switch i % 5 {
	case 0, 1:
		b.General("c", mem, []int64{10, 25, 50}[i%3])
	case 2:
		b.General("c", 15, 100)
	case 3:
		b.Online("c", mem)
	default:
		b.Offline("c", mem, 30)
	}
	return b.Obj()
}

// A score Filter stashed for one pod is not Score's answer for the next pod,
// whose cycle's Filter did not stash one for the node.
func TestStashedScoreStaysInItsCycle(t *testing.T) {
	ctx := context.Background()
	node := v100Node("a", 4, true)
	ni := nodeInfo(node)
	big := builders.GPUPod("big").General("c", 24, 100).Obj()
	small := builders.GPUPod("small").General("c", 2, 10).Obj()
	scoreOf := func(p *QGPU, pod *v1.Pod, filter bool) int64 {
		cs := framework.NewCycleState()
		if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
			t.Fatal(st)
		}
		if filter && !p.Filter(ctx, cs, pod, ni).IsSuccess() {
			t.Fatalf("%s does not fit", pod.Name)
		}
		score, _ := p.Score(ctx, cs, pod, ni)
		return score
	}
	p := newPlugin(t, &args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack"})
	p.setNodes(node)
	fresh := newPlugin(t, &args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack"})
	fresh.setNodes(node)
	want := scoreOf(fresh, small, false)
	stale := scoreOf(p, big, true)
	if stale == want {
		t.Fatalf("the test needs pods that score apart; both score %d", want)
	}
	if got := scoreOf(p, small, false); got != want {
		t.Errorf("small pod scores %d after the big pod's cycle (the big pod scored %d), want %d", got, stale, want)
	}
}
