package sim

import (
	"math/rand"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
	learned "github.com/qgpu-scheduler/qgpu/plugins/qgpu/typical"
)

// Stepper is the replay's scheduling cycle driven pod by pod by a caller
// that chooses the order: the integration test that places each pod through
// the real scheduler and through the replay. Like a scheduler that just
// started, it knows no typical shapes at first and learns them from the
// pods placed (Online), and it breaks ties at random (RandomTie), as
// kube-scheduler does.
type Stepper struct {
	sel  *selector
	conv *Converter
	// capacity and allocated are GPU-milli, as the replay's curve counts them.
	capacity, allocated int64
}

// NewStepper is an empty cluster of nodes, in the mode's accounting, placing
// by policy; seed drives the tie-break.
func NewStepper(mode Mode, nodes []Node, policy placement.Policy, seed int64) *Stepper {
	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	cl := newCluster(mode, nodes)
	st := &Stepper{conv: NewConverter(mode, nodes),
		sel: newSelector(cl, policy, nil, order, rand.New(rand.NewSource(seed)), RandomTie)}
	st.sel.learner = learned.NewLearner()
	for i := range nodes {
		st.capacity += int64(nodes[i].GPUs) * milli
	}
	return st
}

// Request is the pod's qGPU request as the replay converts it (Converter).
func (s *Stepper) Request(p *Pod) *request.Request { return s.conv.Request(p) }

// Best lists the nodes that share the top normalized score for the pod,
// none if it fits nowhere; nothing is placed.
func (s *Stepper) Best(p *Pod, req *request.Request) []int {
	return topNodes(s.sel.scoreNodes(p, req))
}

// Place places the pod as the replay does and returns its node, or -1 when
// no node fits (the pod is dropped, never retried).
func (s *Stepper) Place(p *Pod, req *request.Request) int {
	n := s.sel.choose(p, req)
	if n >= 0 {
		s.sel.commit(n, p, req)
		s.allocated += p.GPUDemand()
	}
	return n
}

// PlaceOn places the pod on node n, another scheduler's choice, taking the
// cards the replay's card policy takes there, and returns their indexes;
// ok is false, and nothing changes, when the pod does not fit node n.
func (s *Stepper) PlaceOn(n int, p *Pod, req *request.Request) (cards []int, ok bool) {
	if _, ok := s.sel.evaluate(n, p, req, s.sel.workload()); !ok {
		return nil, false
	}
	before, after := s.sel.cl.cards[n], s.sel.scratch[n]
	for i := range after {
		if after[i] != before[i] {
			cards = append(cards, after[i].Index)
		}
	}
	s.sel.commit(n, p, req)
	s.allocated += p.GPUDemand()
	return cards, true
}

// Allocation is the share of the cluster's GPU capacity allocated, in %.
func (s *Stepper) Allocation() float64 {
	return float64(s.allocated) * 100 / float64(max(s.capacity, 1))
}
