package qgpu

import (
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

// Score is the score Filter stashed for the node in this cycle (fastpath.Stash);
// otherwise it places the pod on a copy of the node's cards and scores that.
func (p *QGPU) Score(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, err := readState(cs)
	if errors.Is(err, fwk.ErrNotFound) {
		// PreFilter skipped the pod (no qGPU request); without a PreScore
		// that says so, the framework still scores it.
		return 0, nil
	}
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	if s.join != nil {
		return 0, nil // one node
	}
	if score, ok := p.scores.Get(nodeInfo); ok {
		return score, nil
	}
	if s.req.NodeExclusive {
		// Every node it may take is empty: nothing to prefer.
		return 0, nil
	}
	var buf [cardBuf]ledger.Card
	score, _ := p.evaluate(s, p.nodeCards(s, nodeInfo.Node().Name, buf[:0]), nodeInfo)
	return score, nil
}

// evaluate places the pod on n.Cards, which it changes (the caller passes a
// copy), and scores the node by the node policy (and, for online/offline
// pods, the preferences of Tencent qGPU's co-location scheduler). A pod that
// does not fit scores 0, with
// PlaceIn's reason.
func (p *QGPU) evaluate(s *cycleState, n ledger.Node, nodeInfo fwk.NodeInfo) (int64, string) {
	var choices [cardBuf]placement.Choice
	req, reason := s.reqOn(n)
	if reason != "" {
		return 0, reason
	}
	env := p.env(s, nodeInfo)
	if nodeInfo != nil && placement.MeasuresFrag(p.nodePolicy, req, &env) {
		// The node before the pod, measured once per change of the node
		// (fragcache), not once per pod.
		env.Before = p.frags.For(nodeInfo.Node().Name).Frag(n.Cards, env.CPULeft, env.CPUCap > 0, env.Workload)
		env.BeforeKnown = true
	}
	_, score, reason := placement.Evaluate(n.Cards, n.Mixed, req, p.cardPolicy, p.nodePolicy, &env, choices[:0])
	if reason != "" {
		return 0, reason
	}
	return score, ""
}

// ScoreExtensions implements fwk.ScorePlugin.
func (p *QGPU) ScoreExtensions() fwk.ScoreExtensions { return p }

// NormalizeScore maps the scores to [0, MaxNodeScore] with
// placement.Normalize (the trace replay normalizes the same way), so that the
// difference between candidate nodes weighs fully against other plugins.
func (p *QGPU) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	raw := make([]int64, len(scores))
	for i := range scores {
		raw[i] = scores[i].Score
	}
	placement.Normalize(p.nodePolicy, raw)
	for i := range scores {
		scores[i].Score = raw[i]
	}
	return nil
}
