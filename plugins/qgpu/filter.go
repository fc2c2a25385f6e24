package qgpu

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/fastpath"
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

// Filter checks that every container of the pod finds a card on the node,
// and the node-wide sums NodeResourcesFit leaves to it (fastpath.TakeOverFit). It
// reads the ledger and the NodeInfo only: no API calls, no allocation on the
// hot path. A pod of one container (the common case) is placed on a copy
// of the node's cards taken under the node's read lock, and scored there
// for Score (fastpath.Stash); other pods, and pods while preemption simulates
// pods added or removed, are only placed, on a copy with the simulated pods.
func (p *QGPU) Filter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, err := readState(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if s.join != nil {
		return filterJoin(s.join, nodeInfo.Node().Name)
	}
	if reason := p.vocabularyReason(s.req, nodeInfo.Node()); reason != "" {
		p.rejections.rejected(pointFilter, reason)
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
	}
	if s.req.NodeExclusive {
		return p.filterExclusive(s, nodeInfo)
	}
	name := nodeInfo.Node().Name
	var reason string
	var alloc [len(protocol.Resources)]int64
	var node fastpath.Found
	if len(s.req.Containers) == 1 && len(s.deltas[name]) == 0 {
		node = p.refs.Get(p.ledger, nodeInfo, name)
		reason, alloc = p.placeAndScore(s, node, nodeInfo)
	} else {
		reason, alloc = p.place(s, name, nodeInfo)
	}
	// Only a placement refusal can be the quota's: the sums below are the node's.
	if reason != "" && s.quota != nil {
		var byQuota bool
		if reason, byQuota = p.quotaReason(s, name, nodeInfo, reason); byQuota {
			p.rejections.rejected(pointFilter, reasonQuota)
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
		}
	}
	if reason == "" && s.ownsFit && s.fit != (fastpath.FitRequest{}) {
		var unresolvable bool
		if reason, unresolvable = s.fit.Check(node.Requested(nodeInfo), alloc); unresolvable {
			p.rejections.rejected(pointFilter, reason)
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reason)
		}
	}
	if reason != "" {
		p.rejections.rejected(pointFilter, reason)
		return fwk.NewStatus(unschedulableCode(reason), reason)
	}
	return nil
}

// placeAndScore places a pod of one container on a copy of the node's cards
// taken under its read lock (ledger.Ref.Read), and stashes the node's score
// for Score. It returns why the pod does not fit ("" if it does) and the
// node's allocatable qGPU resources.
func (p *QGPU) placeAndScore(s *cycleState, node fastpath.Found, nodeInfo fwk.NodeInfo) (string, [len(protocol.Resources)]int64) {
	var score int64
	var alloc [len(protocol.Resources)]int64
	reason := node.Read(func(n ledger.Node) string {
		alloc = n.Allocatable
		if n.Invalid != "" {
			return invalidReason(n.Invalid)
		}
		req, reason := s.reqOn(n)
		if reason != "" {
			return reason
		}
		if reason := placement.Unfit(n.Cards, n.Mixed, req); reason != "" {
			return reason
		}
		var buf [cardBuf]ledger.Card
		n.Cards = append(buf[:0], n.Cards...)
		s.refuseUntolerated(nodeInfo.Node().Name, n.Cards)
		score, reason = p.evaluate(s, n, nodeInfo)
		return reason
	})
	if reason == "" {
		p.scores.Put(nodeInfo, score)
	}
	return reason, alloc
}

// place places any pod on a copy of the node's cards with the pods
// preemption simulates added or removed, as placeAndScore does, unscored.
func (p *QGPU) place(s *cycleState, name string, nodeInfo fwk.NodeInfo) (string, [len(protocol.Resources)]int64) {
	var buf [cardBuf]ledger.Card
	var choices [cardBuf]placement.Choice
	n := p.nodeCards(s, name, buf[:0])
	if reason := invalidReason(n.Invalid); reason != "" {
		return reason, n.Allocatable
	}
	req, reason := s.reqOn(n)
	if reason != "" {
		return reason, n.Allocatable
	}
	env := p.env(s, nodeInfo)
	_, reason = placement.PlaceIn(n.Cards, n.Mixed, req, p.cardPolicy, &env, choices[:0])
	return reason, n.Allocatable
}

// invalidReason is Filter's constant reason for a node the ledger holds
// invalid (its reason names the annotation's fault; Filter's reasons are
// constant, so that they aggregate per reason), or "" for a valid one.
func invalidReason(invalid string) string {
	switch invalid {
	case "":
		return ""
	case ReasonNotQGPUNode:
		return ReasonNotQGPUNode
	}
	return ReasonNoInventory
}

// unschedulableCode tells preemption which failures removing pods can cure.
func unschedulableCode(reason string) fwk.Code {
	switch reason {
	case placement.ReasonNoCards, placement.ReasonNotMixed, placement.ReasonNoModel, ReasonNotQGPUNode, ReasonNoInventory, ReasonUnresolved:
		return fwk.UnschedulableAndUnresolvable
	}
	return fwk.Unschedulable
}
