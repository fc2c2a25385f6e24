package qgpu

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/args"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/typical"
	"github.com/qgpu-scheduler/qgpu/test/tracepods"
)

// BenchmarkPolicies' cluster: heldPerNode trace pods per node are placed
// before the measure (held in the ledger, not bound), each by the policy
// among benchWindow nodes (so that
// filling 5000 nodes takes seconds, not minutes), and benchArrivals trace
// pods then arrive in turn.
const (
	heldPerNode   = 2
	benchWindow   = 64
	benchArrivals = 64
)

// BenchmarkPolicies measures Filter and Score of each general-pod policy
// per node, on the openb trace's shapes: nodes of the trace's node list
// (its card models, counts and CPU; 300 of them, and 5000 for the shipped
// fragfit, the list repeated), partly taken by its pods, with the workload
// learned from its distinct pod shapes (249 in gpuspec10, of which the
// workload keeps placement.MaxShapes, a fifth of them with a model filter;
// shapes=every: from all its pods, the trace's own 95 %). One iteration is
// one scheduling cycle of one arriving pod: PreFilter, then Filter on
// every node and Score on every node that fits (on every node for a pod
// without cards, which Filter skips). ns/node is the cycle's time over the
// nodes; shapes is the learned workload's.
//
// The trace is $QGPU_TRACES/openb_pod_list_gpuspec10.csv with the node list
// beside it (make bench sets QGPU_TRACES as make integration does); without
// it, tracepods.Generated, which mimics it. The first line of the output
// says which.
func BenchmarkPolicies(b *testing.B) {
	trace, err := tracepods.FromEnv()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("pods from %s", trace.Source)
	for _, size := range []struct {
		policy string
		nodes  int
		// every: the workload learned from every trace pod, not from its
		// distinct shapes.
		every bool
	}{{"binpack", 300, false}, {"fgd", 300, false}, {"fragfit", 300, false}, {"fragfit", 300, true}, {"fragfit", 5000, false}} {
		c := newBenchCluster(b, trace, size.policy, size.nodes, size.every)
		learned := "distinct"
		if size.every {
			learned = "every"
		}
		b.Run(fmt.Sprintf("FilterScore/%s/nodes=%d/shapes=%s", size.policy, size.nodes, learned), func(b *testing.B) {
			ctx := context.Background()
			i := 0
			for b.Loop() {
				c.cycle(ctx, b, c.arrivals[i%len(c.arrivals)])
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(c.infos)), "ns/node")
			b.ReportMetric(float64(c.p.workload.Load().Len()), "shapes")
		})
	}
}

// benchCluster is a plugin on a sample of the trace's nodes.
type benchCluster struct {
	p        *QGPU
	nodes    []*v1.Node
	infos    []fwk.NodeInfo
	arrivals []*v1.Pod
	// held are the pods place reserved, by node.
	held map[string][]*v1.Pod
}

func newBenchCluster(b *testing.B, trace *tracepods.Trace, policy string, size int, every bool) *benchCluster {
	b.Helper()
	c := &benchCluster{p: newPlugin(b, &args.QGPUArgs{NodePolicy: policy, CardPolicy: policy}), held: map[string][]*v1.Pod{}}
	nodes := make([]*v1.Node, 0, size)
	for i := range size {
		src := &trace.Nodes[(i*len(trace.Nodes)/min(size, len(trace.Nodes)))%len(trace.Nodes)]
		n, err := tracepods.NodeObject(fmt.Sprintf("bench-%04d", i), src, 0)
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, n)
		c.infos = append(c.infos, nodeInfo(n))
	}
	c.p.setNodes(nodes...)
	c.nodes = nodes
	rng := rand.New(rand.NewSource(7))
	order := rng.Perm(len(trace.Pods))
	held := 0
	for k := 0; k < 3*len(order) && held < heldPerNode*size; k++ {
		p := &trace.Pods[order[k%len(order)]]
		if !trace.Accepted(p) {
			continue
		}
		start := rng.Intn(len(nodes))
		window := nodes[start:min(start+benchWindow, len(nodes))]
		if c.place(b, trace.PodObject(fmt.Sprintf("held-%05d", held), p), window) {
			held++
		}
	}
	c.learn(trace, every)
	for _, k := range order {
		if p := &trace.Pods[k]; trace.Accepted(p) {
			c.arrivals = append(c.arrivals, trace.PodObject(fmt.Sprintf("new-%04d", len(c.arrivals)), p))
		}
		if len(c.arrivals) == benchArrivals {
			break
		}
	}
	return c
}

// place runs a scheduling cycle of pod over nodes and reserves the best
// node: the ledger holds the pod there (no API object, no bind).
func (c *benchCluster) place(b *testing.B, pod *v1.Pod, nodes []*v1.Node) bool {
	ctx := context.Background()
	cs := framework.NewCycleState()
	if _, st := c.p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
		return false // a pod without cards takes no card: not held
	}
	best, bestScore := "", int64(-1)
	for _, n := range nodes {
		ni := nodeInfo(n)
		if !c.p.Filter(ctx, cs, pod, ni).IsSuccess() {
			continue
		}
		if s, _ := c.p.Score(ctx, cs, pod, ni); s > bestScore {
			best, bestScore = n.Name, s
		}
	}
	if best == "" || !c.p.Reserve(ctx, cs, pod, best).IsSuccess() {
		return false
	}
	pod.Spec.NodeName = best
	c.held[best] = append(c.held[best], pod)
	return true
}

// learn replaces the workload the held pods taught by one that counted every
// distinct shape of the trace's pods (card demand, CPU, model filter) once,
// so that it keeps far more than the trace's own 95 % (74 shapes of
// gpuspec10); with every, one that counted every pod of the trace (those
// 74).
func (c *benchCluster) learn(trace *tracepods.Trace, every bool) {
	c.p.workload = typical.NewLearner()
	seen := map[string]bool{}
	for i := range trace.Pods {
		p := &trace.Pods[i]
		key := fmt.Sprint(p.CPUMilli, p.NumGPU, p.GPUMilli, p.Models)
		if seen[key] && !every {
			continue
		}
		seen[key] = true
		req := trace.Request(p)
		if len(req.Containers) == 0 {
			req = nil
		}
		c.p.workload.ObservePod(types.UID("trace-"+p.Name), req, p.CPUMilli)
	}
	c.p.workload.Publish()
}

// cycle is one scheduling cycle of pod over all nodes, without Reserve.
func (c *benchCluster) cycle(ctx context.Context, b *testing.B, pod *v1.Pod) {
	cs := framework.NewCycleState()
	_, st := c.p.PreFilter(ctx, cs, pod, c.infos)
	skip := st.IsSkip() // a pod without cards: Filter skipped, Score still called
	if !skip && !st.IsSuccess() {
		b.Fatalf("PreFilter %s: %v", pod.Name, st)
	}
	for _, ni := range c.infos {
		if skip || c.p.Filter(ctx, cs, pod, ni).IsSuccess() {
			c.p.Score(ctx, cs, pod, ni)
		}
	}
}
