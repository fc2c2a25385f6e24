package qgpu

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// BenchmarkExtensionPoints measures PreFilter, Filter and Score for a node of
// 8 cards holding 0, 16 and 64 pods (DESIGN: no allocation in Filter). Score
// follows Filter in a cycle and reads its stash; Score/unstashed places and
// scores the pod itself, as it does for a node Filter did not score.
func BenchmarkExtensionPoints(b *testing.B) {
	for _, held := range []int{0, 16, 64} {
		p := newPlugin(b, nil)
		n := builders.GPUNode("n1", false, builders.Cards(8, "A100-80G", 81920))
		p.setNodes(n)
		for i := range held {
			pod := builders.GPUPod(fmt.Sprintf("held-%d", i)).General("c", 1, 10).Obj()
			if node, st := schedule(b, p, pod, n); node == "" {
				b.Fatalf("placing pod %d: %v", i, st)
			}
		}
		pod := builders.GPUPod("new").General("c", 2, 5).Obj()
		ni := nodeInfo(n)
		ctx := context.Background()
		cs := framework.NewCycleState()
		p.PreFilter(ctx, cs, pod, nil)
		b.Run(fmt.Sprintf("PreFilter/pods=%d", held), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.PreFilter(ctx, framework.NewCycleState(), pod, nil)
			}
		})
		b.Run(fmt.Sprintf("Filter/pods=%d", held), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if st := p.Filter(ctx, cs, pod, ni); !st.IsSuccess() {
					b.Fatal(st)
				}
			}
		})
		b.Run(fmt.Sprintf("Score/pods=%d", held), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Score(ctx, cs, pod, ni)
			}
		})
		unstashed := framework.NewCycleState()
		p.PreFilter(ctx, unstashed, pod, nil)
		b.Run(fmt.Sprintf("Score/unstashed/pods=%d", held), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Score(ctx, unstashed, pod, ni)
			}
		})
	}
}

func TestFilterDoesNotAllocate(t *testing.T) {
	p := newPlugin(t, nil)
	n := builders.GPUNode("n1", false, builders.Cards(8, "A100-80G", 81920))
	p.setNodes(n)
	pod := builders.GPUPod("new").General("c", 2, 5).Obj()
	ni := nodeInfo(n)
	ctx := context.Background()
	cs := framework.NewCycleState()
	p.PreFilter(ctx, cs, pod, nil)
	if allocs := testing.AllocsPerRun(100, func() { p.Filter(ctx, cs, pod, ni) }); allocs != 0 {
		t.Fatalf("Filter allocates %v times per call", allocs)
	}
}
