package sim

import (
	"math/rand"
	"slices"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
	learned "github.com/qgpu-scheduler/qgpu/plugins/qgpu/typical"
)

// selector is the scheduling cycle of the replay, as kube-scheduler runs it
// with the QGPU plugin alone scoring: filter (CPU, memory, then the plugin's
// placement), score with placement.Evaluate, normalize with
// placement.Normalize, and pick the best node, ties broken at random as
// kube-scheduler's selectHost does.
type selector struct {
	cl     *cluster
	policy placement.Policy
	// work is the target workload, or learner's when it learns online.
	work    *placement.Workload
	learner *learned.Learner
	rng     *rand.Rand
	scratch [][]ledger.Card
	choices []placement.Choice
	cand    []int
	scores  []int64
	ranks   []int64
	ties    TieBreak
	// order is the seed's node order, in which ties go to the first.
	order []int
	// mixed marks the mixed nodes (Classes); mixedAlike: general pods
	// see them as any other node.
	mixed      []bool
	mixedAlike bool
	// bound are the pods placed, what a restarted scheduler finds bound
	// (kept when learning online, for failover).
	bound []boundPod
}

// TieBreak is how the replay picks among nodes with the best score.
type TieBreak string

const (
	// FirstNode takes the first in the seed's node order (NodeOrder), as
	// the paper's simulator does.
	FirstNode TieBreak = "first"
	// RandomTie takes one at random (seeded), as kube-scheduler's selectHost does.
	RandomTie TieBreak = "random"
)

func newSelector(cl *cluster, policy placement.Policy, work *placement.Workload, order []int, rng *rand.Rand, ties TieBreak) *selector {
	s := &selector{cl: cl, policy: policy, work: work, rng: rng, ties: ties, order: order,
		scratch: make([][]ledger.Card, len(cl.nodes)), ranks: make([]int64, len(cl.nodes)), mixed: make([]bool, len(cl.nodes))}
	for i := range cl.cards {
		s.scratch[i] = make([]ledger.Card, len(cl.cards[i]))
		s.ranks[i] = placement.NodeRank(cl.nodes[i].Name)
	}
	return s
}

// Env is what the plugin's Score passes for a node: its CPU, rank and the workload.
func Env(work *placement.Workload, cpuLeft, cpuCap, podCPU int64) *placement.Env {
	return &placement.Env{Workload: work, CPULeft: cpuLeft, CPUCap: cpuCap, PodCPU: podCPU}
}

// scoreNodes evaluates every node for the pod (scratch holds each node's
// cards after the pod) and returns the feasible nodes and their normalized
// scores.
func (s *selector) scoreNodes(pod *Pod, req *request.Request) ([]int, []int64) {
	s.cand, s.scores = s.cand[:0], s.scores[:0]
	work := s.workload()
	for _, i := range s.order {
		if score, ok := s.evaluate(i, pod, req, work); ok {
			s.cand = append(s.cand, i)
			s.scores = append(s.scores, score)
		}
	}
	placement.Normalize(s.policy, s.scores)
	return s.cand, s.scores
}

// evaluate is Filter and Score on node i: the raw score, and whether the
// pod fits (CPU, memory, then the plugin's placement into scratch[i]).
func (s *selector) evaluate(i int, pod *Pod, req *request.Request, work *placement.Workload) (int64, bool) {
	if s.cl.cpuLeft[i] < pod.CPUMilli || s.cl.memLeft[i] < pod.MemoryMiB {
		return 0, false
	}
	copy(s.scratch[i], s.cl.cards[i])
	env := Env(work, s.cl.cpuLeft[i], s.cl.nodes[i].CPUMilli, pod.CPUMilli)
	env.Rank = s.ranks[i]
	var reason string
	var score int64
	mixed := s.mixed[i] && (req.Class != protocol.ClassGeneral || !s.mixedAlike)
	s.choices, score, reason = placement.Evaluate(s.scratch[i], mixed, req, s.policy, s.policy, env, s.choices[:0])
	return score, reason == ""
}

// workload is the target workload of this cycle: the learner's latest
// snapshot when it learns online (nil before the first pod, as in a
// scheduler that just started).
func (s *selector) workload() *placement.Workload {
	if s.learner != nil {
		return s.learner.Load()
	}
	return s.work
}

// BestNodes is one scheduling cycle of the replay for callers that keep
// their own cluster (the integration test comparing with the real
// scheduler): nodes are only cards (CPU unknown), after[i] receives node i's
// cards with the pod placed, and best lists every node with the top score.
func BestNodes(cards [][]ledger.Card, mixed []bool, req *request.Request, policy placement.Policy, after [][]ledger.Card) []int {
	var cand []int
	var scores []int64
	for i := range cards {
		after[i] = append(after[i][:0], cards[i]...)
		_, score, reason := placement.Evaluate(after[i], mixed[i], req, policy, policy, nil, nil)
		if reason == "" {
			cand, scores = append(cand, i), append(scores, score)
		}
	}
	placement.Normalize(policy, scores)
	return topNodes(cand, scores)
}

// topNodes lists the candidates that share the top score, none if there
// is no candidate.
func topNodes(cand []int, scores []int64) []int {
	if len(cand) == 0 {
		return nil
	}
	hi := slices.Max(scores)
	var best []int
	for k, n := range cand {
		if scores[k] == hi {
			best = append(best, n)
		}
	}
	return best
}

// place puts the pod on the best node and reports whether one fitted.
func (s *selector) place(pod *Pod, req *request.Request) bool {
	n := s.choose(pod, req)
	if n < 0 {
		return false
	}
	s.commit(n, pod, req)
	return true
}

// choose is the node with the best score (-1 if none fits), ties broken by
// s.ties; scratch holds the nodes' cards after the pod.
func (s *selector) choose(pod *Pod, req *request.Request) int {
	cand, scores := s.scoreNodes(pod, req)
	best, ties := -1, 0
	for k := range cand {
		switch {
		case best < 0 || scores[k] > scores[best]:
			best, ties = k, 1
		case scores[k] == scores[best] && s.ties == FirstNode:
		case scores[k] == scores[best]:
			ties++
			if s.rng.Intn(ties) == 0 {
				best = k
			}
		}
	}
	if best < 0 {
		return -1
	}
	return cand[best]
}

// commit takes node n's cards after the pod from scratch, books its CPU and
// memory, and lets the learner see the pod, as Reserve does.
func (s *selector) commit(n int, pod *Pod, req *request.Request) {
	copy(s.cl.cards[n], s.scratch[n])
	s.cl.cpuLeft[n] -= pod.CPUMilli
	s.cl.memLeft[n] -= pod.MemoryMiB
	if s.learner != nil {
		s.learner.Observe(req, pod.CPUMilli)
		s.bound = append(s.bound, boundPod{req, pod.CPUMilli})
	}
}
