package qgpu

import (
	"fmt"
	"k8s.io/apimachinery/pkg/types"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/fastpath"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

const stateKey fwk.StateKey = Name

// cycleState is what PreFilter learns once and the later points reuse.
type cycleState struct {
	req *request.Request
	// podCPU is the pod's CPU request, for the policies that weigh CPU.
	podCPU int64
	// fit is the pod's request of the qGPU resources that Filter checks in
	// NodeResourcesFit's stead when ownsFit (see fastpath.TakeOverFit).
	fit     fastpath.FitRequest
	ownsFit bool
	// deltas are the pods that preemption simulates as added (+1) or removed
	// (-1), per node. Set only on the clones the preemption evaluator makes.
	deltas map[string][]delta
	// quota is set when the namespace's quota keeps the pod off some
	// models (quota.go); req then leaves them out.
	quota *quotaCycle
	// assignment is what Reserve decided, for PreBind.
	assignment []protocol.ContainerAssignment
	// resolved holds req per node shape when req is relative (reqOn); nil otherwise.
	resolved *resolved
	// claimsWritten: PreBind began writing the claims' allocations, so
	// Unreserve takes them back.
	claimsWritten bool
	// shares are the share IDs PreBind drew for the claims' allocations,
	// by claim UID: what Unreserve may take back.
	shares map[types.UID]types.UID
	// untolerated are, by node, the cards whose device carries a taint
	// one of the pod's claims does not tolerate (claimtaints.go); read-only.
	untolerated map[string][]int
	// join is set for a pod that joins claims other pods' cycles
	// allocated (claims_join.go); every extension point then does only that.
	join *joinPlan
}

type delta struct {
	holding ledger.Holding
	sign    int
}

// Clone implements fwk.StateData. The request and assignment are never
// mutated after they are set, so only the deltas are copied.
func (s *cycleState) Clone() fwk.StateData {
	c := *s
	if s.deltas != nil {
		c.deltas = make(map[string][]delta, len(s.deltas))
		for n, d := range s.deltas {
			c.deltas[n] = append([]delta(nil), d...)
		}
	}
	return &c
}

func readState(cs fwk.CycleState) (*cycleState, error) {
	d, err := cs.Read(stateKey)
	if err != nil {
		return nil, fmt.Errorf("reading %q from cycleState: %w", stateKey, err)
	}
	s, ok := d.(*cycleState)
	if !ok {
		return nil, fmt.Errorf("reading %q from cycleState: unexpected type %T", stateKey, d)
	}
	return s, nil
}

// nodeCards copies the node's cards from the ledger into buf and applies the
// preemption deltas of this cycle.
func (p *QGPU) nodeCards(s *cycleState, node string, buf []ledger.Card) ledger.Node {
	n, _ := p.ledger.CopyNode(node, buf)
	for _, d := range s.deltas[node] {
		d.holding.ApplyTo(n.Cards, d.sign)
	}
	s.refuseUntolerated(node, n.Cards)
	return n
}
