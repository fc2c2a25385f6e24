package qgpu

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

// Reasons for nodes that can never take qGPU pods as they are labelled.
const (
	ReasonNotQGPUNode = ledger.ReasonNotQGPUNode
	ReasonNoInventory = "node has no valid qGPU inventory"
)

// cardBuf is large enough for every real server, so Filter does not allocate.
const cardBuf = 16

// Filter checks that every container of the pod finds a card on the node. It
// reads the ledger only: no API calls, no allocation on the hot path.
func (p *QGPU) Filter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, err := readState(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	var buf [cardBuf]ledger.Card
	n := p.nodeCards(s, nodeInfo.Node().Name, buf[:0])
	if n.Invalid != "" {
		// The ledger's reason names the annotation's fault; Filter's
		// reasons are constant, so that they aggregate per reason.
		if n.Invalid == ReasonNotQGPUNode {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ReasonNotQGPUNode)
		}
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ReasonNoInventory)
	}
	var choices [cardBuf]placement.Choice
	// Whether one container fits does not depend on which card it would
	// take, so single-container pods skip the policy's (costlier) choice.
	policy, env := p.cardPolicy, p.env(s, nodeInfo)
	if len(s.req.Containers) == 1 {
		policy = placement.Binpack
	}
	if _, reason := placement.PlaceIn(n.Cards, n.Mixed, s.req, policy, &env, choices[:0]); reason != "" {
		return fwk.NewStatus(unschedulableCode(reason), reason)
	}
	return nil
}

// unschedulableCode tells preemption which failures removing pods can cure.
func unschedulableCode(reason string) fwk.Code {
	switch reason {
	case placement.ReasonNoCards, placement.ReasonNotMixed, placement.ReasonNoModel:
		return fwk.UnschedulableAndUnresolvable
	}
	return fwk.Unschedulable
}
