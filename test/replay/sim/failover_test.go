package sim

import (
	"reflect"
	"testing"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	learned "github.com/qgpu-scheduler/qgpu/plugins/qgpu/typical"
)

// A failover replaces the learner once the allocation reaches its
// percentage and not before: the curve up to there is the run's without
// one. The rebuilt learner has the workload of every pod placed, at once;
// the cold one none. Only a learner that learns online can fail over.
func TestFailover(t *testing.T) {
	nodes, pods := load(t)
	cfg := Config{Nodes: nodes, Pods: pods, Mode: Paper, Policy: placement.FragFit, Seed: 42, MaxArrivalPct: 130, Typical: Online}
	without := Run(cfg)
	if without.FailedOver != -1 {
		t.Fatalf("FailedOver %d without a failover, want -1", without.FailedOver)
	}
	for _, from := range []FailoverLearner{Rebuilt, Cold} {
		cfg.Failover = Failover{Pct: 60, Learner: from}
		with := Run(cfg)
		if with.FailedOver < 0 {
			t.Fatalf("%s: no failover at 60%% allocated (reached %.1f%%)", from, without.Alloc[130])
		}
		for k := 0; k < 55; k++ {
			if with.Alloc[k] != without.Alloc[k] {
				t.Fatalf("%s: allocation at %d%% arrived %.2f, %.2f without a failover: the failover came early", from, k, with.Alloc[k], without.Alloc[k])
			}
		}
	}

	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	sel := newSelector(newCluster(Paper, nodes), placement.FragFit, nil, order, nil, FirstNode)
	sel.learner = learned.NewLearner()
	conv := NewConverter(Paper, nodes)
	want := learned.NewLearner()
	for i := range 70 { // past RelearnEvery: the running learner's snapshot lags
		p := &pods[i]
		req := conv.Request(p)
		if sel.place(p, req) {
			want.Observe(req, p.CPUMilli)
		}
	}
	want.Publish()
	sel.failover(Rebuilt)
	if !reflect.DeepEqual(sel.learner.Load(), want.Load()) {
		t.Fatal("the rebuilt learner's workload is not that of the pods placed")
	}
	sel.failover(Cold)
	if sel.learner.Load() != nil {
		t.Fatal("a cold learner after the failover knows shapes")
	}

	if err := (Failover{Pct: 90, Learner: Rebuilt}).Validate(FromTrace); err == nil {
		t.Error("a failover with the trace's shapes was accepted")
	}
	if err := (Failover{Pct: 90, Learner: "warm"}).Validate(Online); err == nil {
		t.Error("an unknown learner was accepted")
	}
}
