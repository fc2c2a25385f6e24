package qgpu

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Reserve chooses the cards against the live ledger, under the node's lock,
// and records the choice in memory only; PreBind writes it to the API.
func (p *QGPU) Reserve(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	s, err := readState(cs)
	if errors.Is(err, fwk.ErrNotFound) {
		// PreFilter skipped the pod (no qGPU request): the framework skips
		// Filter then, but not Reserve.
		return nil
	}
	if err != nil {
		return fwk.AsStatus(err)
	}
	if s.join != nil {
		return nil // the slices are the shared claims'
	}
	if s.req.CPUOnly() {
		p.shared.learnCPUOnly(pod.UID, nodeName, s.podCPU)
		return nil
	}
	var assignment []protocol.ContainerAssignment
	req := s.req
	env := p.env(s, p.snapshotNode(nodeName))
	_, err = p.ledger.ReserveFor(pod.UID, pod.Namespace, nodeName, s.req.Class, func(n ledger.Node) ([]protocol.Slice, error) {
		if n.Invalid != "" {
			return nil, fmt.Errorf("%s: %s", ReasonNoInventory, n.Invalid)
		}
		var reason string
		if req, reason = s.reqOn(n); reason != "" {
			return nil, fmt.Errorf("%s", reason)
		}
		if len(s.untolerated[nodeName]) > 0 {
			// n.Cards are the ledger's own: refuse on a copy.
			n.Cards = append([]ledger.Card(nil), n.Cards...)
			s.refuseUntolerated(nodeName, n.Cards)
		}
		var err error
		if assignment, err = p.chooseCards(req, n, &env); err != nil {
			return nil, err
		}
		slices := holdingOf(nodeName, req, assignment).Slices
		if err := p.quotaReserve(pod, req.Class, n.Cards, slices); err != nil {
			return nil, err
		}
		return slices, nil
	})
	if err != nil {
		p.rejections.rejected(pointReserve, reserveReason(err))
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	s.assignment = assignment
	p.workload.ObservePod(pod.UID, req, s.podCPU)
	klog.FromContext(ctx).V(4).Info("qGPU slices reserved", "pod", klog.KObj(pod), "node", nodeName, "assignment", assignment)
	return nil
}

// chooseCards places the pod on the node's cards: every card whole for a
// node-exclusive pod, else by the card policy.
func (p *QGPU) chooseCards(req *request.Request, n ledger.Node, env *placement.Env) ([]protocol.ContainerAssignment, error) {
	if req.NodeExclusive {
		return exclusiveAssignment(n.Cards, req)
	}
	choices, reason := placement.PlaceIn(n.Cards, n.Mixed, req, p.cardPolicy, env, nil)
	if reason != "" {
		return nil, fmt.Errorf("%s", reason)
	}
	return placement.Slices(n.Cards, req, choices), nil
}

// snapshotNode is the cycle's view of the node (its CPU for the policies),
// nil where there is none (unit tests, a node gone).
func (p *QGPU) snapshotNode(name string) fwk.NodeInfo {
	if !p.live || p.handle.SnapshotSharedLister() == nil {
		return nil
	}
	ni, err := p.handle.SnapshotSharedLister().NodeInfos().Get(name)
	if err != nil {
		return nil
	}
	return ni
}

// Unreserve frees what Reserve assumed; it is idempotent, never frees a
// newer decision for the same pod on another node, and never frees slices
// the informer already saw the pod bound with (a bind can fail after the
// apiserver wrote it; see the ledger's package doc).
func (p *QGPU) Unreserve(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeName string) {
	if s, err := readState(cs); err == nil && s.join != nil && s.join.joined {
		p.leaveClaims(ctx, s.join, pod)
	}
	if s, err := readState(cs); err == nil && s.claimsWritten && !p.mayBeBound(pod, nodeName) {
		p.releaseClaims(ctx, s, pod)
	}
	if p.ledger.Unreserve(pod.UID, nodeName) {
		klog.FromContext(ctx).V(4).Info("qGPU slices released", "pod", klog.KObj(pod), "node", nodeName)
	}
}

// mayBeBound reports whether the ledger holds the pod on node as bound or
// with a binding of unknown outcome: its claims then stay allocated too.
// A binding that was not written leaves them allocated for an unbound
// pod, which the pod's next cycle releases (staleClaims).
func (p *QGPU) mayBeBound(pod *v1.Pod, node string) bool {
	h, ok := p.ledger.Holding(pod.UID)
	return ok && h.Node == node && (h.Bound || h.Uncertain)
}

// holdingOf flattens an assignment into a ledger holding.
func holdingOf(node string, req *request.Request, containers []protocol.ContainerAssignment) ledger.Holding {
	h := ledger.Holding{Node: node, Class: req.Class}
	for _, c := range containers {
		h.Slices = append(h.Slices, c.Slices...)
	}
	return h
}
