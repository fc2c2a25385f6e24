package qgpu

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/typical"
	"github.com/qgpu-scheduler/qgpu/test/tracepods"
)

// BenchmarkPoliciesLive is BenchmarkPolicies' cycle as a live scheduler
// runs it, beside the warm-cache lower bound BenchmarkPolicies measures:
//
//   - the NodeInfos hold their pods (the held trace pods, with their CPU
//     and memory requests), as the scheduler's snapshot does;
//   - every cycle ends with NormalizeScore over the scored nodes, Reserve
//     on the best one (the learner counts the pod: a new UID each cycle,
//     so the workload is republished every typical.RelearnEvery placements
//     and each new workload misses every node's fragcache entry once) and
//     Unreserve (so the cluster stays as filled as it started).
//
// The framework's parallel Filter and Score workers are left out, as in
// BenchmarkPolicies: both run the same calls one node after another, so
// ns/node compares the two. docs/performance.md has the figures.
func BenchmarkPoliciesLive(b *testing.B) {
	trace, err := tracepods.FromEnv()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("pods from %s", trace.Source)
	for _, size := range []struct {
		policy string
		nodes  int
	}{{"binpack", 300}, {"fgd", 300}, {"fragfit", 300}, {"fragfit", 5000}} {
		c := newBenchCluster(b, trace, size.policy, size.nodes, false)
		c.withPods()
		b.Run(fmt.Sprintf("FilterScore/%s/nodes=%d", size.policy, size.nodes), func(b *testing.B) {
			ctx := context.Background()
			i := 0
			for b.Loop() {
				pod := c.arrivals[i%len(c.arrivals)].DeepCopy()
				pod.UID = types.UID(fmt.Sprintf("live-%d", i))
				c.liveCycle(ctx, b, pod)
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(c.infos)), "ns/node")
			b.ReportMetric(float64(i)/typical.RelearnEvery, "relearns")
			b.ReportMetric(float64(c.p.workload.Load().Len()), "shapes")
		})
	}
}

// withPods rebuilds the NodeInfos with the pods place held on each node.
func (c *benchCluster) withPods() {
	for i, n := range c.nodes {
		ni := framework.NewNodeInfo(c.held[n.Name]...)
		ni.SetNode(n)
		c.infos[i] = ni
	}
}

// liveCycle is one scheduling cycle of pod: PreFilter, Filter and Score on
// every node, NormalizeScore, Reserve on the best node, then Unreserve.
func (c *benchCluster) liveCycle(ctx context.Context, b *testing.B, pod *v1.Pod) {
	cs := framework.NewCycleState()
	_, st := c.p.PreFilter(ctx, cs, pod, c.infos)
	skip := st.IsSkip()
	if !skip && !st.IsSuccess() {
		b.Fatalf("PreFilter %s: %v", pod.Name, st)
	}
	scores := make(fwk.NodeScoreList, 0, len(c.infos))
	for _, ni := range c.infos {
		if skip || c.p.Filter(ctx, cs, pod, ni).IsSuccess() {
			s, _ := c.p.Score(ctx, cs, pod, ni)
			scores = append(scores, fwk.NodeScore{Name: ni.Node().Name, Score: s})
		}
	}
	if len(scores) == 0 {
		return
	}
	c.p.NormalizeScore(ctx, cs, pod, scores)
	best := scores[0]
	for _, s := range scores[1:] {
		if s.Score > best.Score {
			best = s
		}
	}
	if c.p.Reserve(ctx, cs, pod, best.Name).IsSuccess() {
		c.p.Unreserve(ctx, cs, pod, best.Name)
	}
}
