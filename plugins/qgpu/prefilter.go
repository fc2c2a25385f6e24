package qgpu

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/fastpath"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// PreFilter parses the pod's request once per cycle; a broken request can
// never fit anywhere. Filter skips pods without qGPU requests, and so does
// every later point unless the node policy measures fragmentation (fgd,
// fragfit): then Score places such a pod by what its CPU strands of the
// nodes' free cards, and Reserve counts its shape (cpuOnlyCycle).
func (p *QGPU) PreFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	req, err := p.parse(pod)
	if request.UsesClaims(pod) {
		if st := p.claimStatus(ctx, pod, req, err); st != nil {
			return nil, st
		}
	}
	if err != nil {
		p.rejections.rejected(pointPreFilter, reasonInvalidRequest)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if req != nil && len(req.Shared) > 0 {
		return p.joinCycle(cs, req)
	}
	if req == nil {
		return nil, p.cpuOnlyCycle(ctx, cs, pod, len(nodes))
	}
	// A restarted scheduler must not place against a half-rebuilt ledger.
	if !p.waitSynced(ctx) {
		return nil, fwk.AsStatus(ctx.Err())
	}
	if h, ok := p.ledger.Holding(pod.UID); ok && h.Uncertain {
		// Placed again, the pod could be booked twice. Preemption cannot
		// help; the informer settles the holding and wakes the pod.
		p.rejections.rejected(pointPreFilter, reasonBindUncertain)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonBindUncertain)
	}
	klog.FromContext(ctx).V(5).Info("qGPU request", "pod", klog.KObj(pod), "class", req.Class, "containers", len(req.Containers))
	req, q, st := p.quotaPreFilter(pod, req)
	if st != nil {
		return nil, st
	}
	p.scores.Reset(len(nodes))
	s := &cycleState{req: req, podCPU: podCPU(pod), quota: q}
	if req.Relative() {
		s.resolved = &resolved{}
	}
	s.fit, s.ownsFit = fastpath.TakeOverFit(cs)
	cs.Write(stateKey, s)
	if len(req.Claims) > 0 {
		return p.claimNodes(s, req)
	}
	return p.eligibleNodes(req, len(nodes)), nil
}

// cpuOnlyCycle starts the cycle of a pod without qGPU requests: Skip, so
// that Filter leaves it alone, with a cycleState for Score and Reserve when
// the node policy places such pods.
func (p *QGPU) cpuOnlyCycle(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodes int) *fwk.Status {
	if !p.nodePolicy.MeasuresCPUOnly() {
		return fwk.NewStatus(fwk.Skip)
	}
	if !p.waitSynced(ctx) {
		return fwk.AsStatus(ctx.Err())
	}
	p.scores.Reset(nodes) // Score must not read the last cycle's stash
	cs.Write(stateKey, &cycleState{req: &request.Request{Class: protocol.ClassGeneral}, podCPU: podCPU(pod)})
	return fwk.NewStatus(fwk.Skip)
}

// waitSynced waits until the informers feeding the ledger have synced (false
// if ctx ends first). An informer stays synced once it has, so after the
// first success it answers from a flag: cache.WaitForCacheSync starts a
// poller goroutine and a context per call, which on a busy scheduler cost
// each cycle a goroutine hand-off on the scheduling goroutine (0.3 ms of wall
// clock for 0.01 ms of CPU in make bench-throughput's profile).
func (p *QGPU) waitSynced(ctx context.Context) bool {
	if p.allSynced.Load() {
		return true
	}
	done := true
	for _, synced := range p.synced {
		done = done && synced()
	}
	if !done && !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		return false
	}
	p.allSynced.Store(true)
	return true
}

// eligibleNodes narrows the cycle to the nodes labelled for the pod's class
// (qGPU nodes; mixed ones for online and offline pods) when that makes the
// cycle cheaper (narrowingPays), so that Filter, every other plugin's Filter
// and Score skip the rest. kube-scheduler reports the nodes left out as
// "didn't satisfy plugin(s) [QGPU]"; a labelled node with a broken inventory
// is kept, so that Filter names its fault. nil (all nodes) otherwise, and
// when no node is labelled, so that Filter's per-node reasons say what is
// missing.
func (p *QGPU) eligibleNodes(req *request.Request, nodes int) *fwk.PreFilterResult {
	names := p.ledger.Eligible(req.Class != protocol.ClassGeneral)
	if names.Len() == 0 || !narrowingPays(names.Len(), nodes) {
		return nil
	}
	return &fwk.PreFilterResult{NodeNames: names}
}

// Relative costs per node, rough estimates from CPU profiles of make
// bench-throughput: a node that passes every Filter and is scored; a node
// QGPU's Filter (which runs first) turns away; a name of a PreFilterResult,
// which kube-scheduler copies and looks up in its snapshot on the scheduling
// goroutine.
const (
	costEvaluated = 6
	costRejected  = 1
	costListed    = 1
)

// narrowingPays compares one cycle over all n nodes, of which m are
// eligible, with one over the m alone. kube-scheduler stops filtering once
// it found feasibleToFind(nodes) feasible ones: over all nodes it evaluates
// that many and turns away about (n-m)/m as many on the way; over the m it
// evaluates feasibleToFind(m), a larger share of a smaller set, and pays for
// listing them. Narrowing 250 of 500 nodes pays (120 evaluated instead of 230
// and 230 turned away); 2500 of 5000 does not (750 evaluated instead of 500).
func narrowingPays(m, n int) bool {
	if m >= n {
		return false
	}
	all := min(feasibleToFind(n), m)
	narrowed := feasibleToFind(m)*costEvaluated + m*costListed
	return narrowed < all*costEvaluated+min(all*(n-m)/m, n-m)*costRejected
}

// feasibleToFind is kube-scheduler's numFeasibleNodesToFind (v1.34,
// unexported) with the default, adaptive percentageOfNodesToScore. A profile
// that sets the percentage only makes the estimate, not the result, wrong.
func feasibleToFind(n int) int {
	const minNodes, minPercent = 100, 5
	if n < minNodes {
		return n
	}
	percent := max(50-n/125, minPercent)
	return max(n*percent/100, minNodes)
}

// PreFilterExtensions lets kube-scheduler's preemption simulate removing
// lower-priority pods (and adding nominated ones) card by card.
func (p *QGPU) PreFilterExtensions() fwk.PreFilterExtensions { return p }

// AddPod implements fwk.PreFilterExtensions.
func (p *QGPU) AddPod(ctx context.Context, cs fwk.CycleState, _ *v1.Pod, add fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, err := readState(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	node := nodeInfo.Node().Name
	pod := add.GetPod()
	if h, ok := p.ledger.Holding(pod.UID); ok {
		if h.Node == node {
			s.addDelta(node, h, 1)
		}
		return nil
	}
	// A nominated pod not yet in the ledger: place it as it would be placed.
	req, err := p.parse(pod)
	if err != nil || req == nil {
		return nil
	}
	if req.NodeExclusive {
		if slices, reason := exclusiveSlices(p.nodeCards(s, node, nil).Cards); reason == "" {
			s.addDelta(node, ledger.Holding{Node: node, Class: req.Class, Slices: slices}, 1)
		}
		return nil
	}
	n := p.nodeCards(s, node, nil)
	if req, err = req.Resolve(largestCard(req, n), len(n.Cards)); err != nil {
		return nil
	}
	choices, reason := placement.Place(n.Cards, n.Mixed, req, p.cardPolicy, nil)
	if reason != "" {
		return nil
	}
	s.addDelta(node, holdingOf(node, req, placement.Slices(n.Cards, req, choices)), 1)
	return nil
}

// RemovePod implements fwk.PreFilterExtensions.
func (p *QGPU) RemovePod(ctx context.Context, cs fwk.CycleState, _ *v1.Pod, rm fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, err := readState(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	node := nodeInfo.Node().Name
	if h, ok := p.ledger.Holding(rm.GetPod().UID); ok && h.Node == node {
		s.addDelta(node, h, -1)
	}
	return nil
}

func (s *cycleState) addDelta(node string, h ledger.Holding, sign int) {
	if s.deltas == nil {
		s.deltas = map[string][]delta{}
	}
	s.deltas[node] = append(s.deltas[node], delta{holding: h, sign: sign})
}
