package sim

import (
	"math/rand"
	"slices"
	"strconv"

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
	// fragFit switches parts of fragfit off (Config.FragFit).
	fragFit placement.FragFitOptions
	// defaultPct of the CPU-only pods go to kube-scheduler's default
	// profile (Config.DefaultCPUPct), its ties drawn from kubeRng.
	defaultPct int
	kubeRng    *rand.Rand
	// keep makes commit record what each pod takes of its cards, for
	// its departure (Churn).
	keep bool
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

// saltRanks replaces the nodes' fixed ranks by those of their names
// salted with the seed: the same kind of order, another one per seed.
func (s *selector) saltRanks(seed int64) {
	for i := range s.ranks {
		s.ranks[i] = placement.NodeRank(strconv.FormatInt(seed, 10) + "/" + s.cl.nodes[i].Name)
	}
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
	env.Rank, env.FragFit = s.ranks[i], s.fragFit
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
	_, ok := s.placeHolding(pod, req)
	return ok
}

// placeHolding places the pod, by kube-scheduler's default profile when
// it places that pod (byDefault), else by the policy, and returns what it
// holds.
func (s *selector) placeHolding(pod *Pod, req *request.Request) (holding, bool) {
	if s.byDefault(pod) {
		n := s.chooseDefault(pod)
		if n < 0 {
			return holding{}, false
		}
		h := holding{node: n}
		s.book(n, pod, req, &h)
		return h, true
	}
	n := s.choose(pod, req)
	if n < 0 {
		return holding{}, false
	}
	return s.commit(n, pod, req), true
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
func (s *selector) commit(n int, pod *Pod, req *request.Request) holding {
	h := holding{node: n}
	if s.keep {
		h.cards = takes(s.cl.cards[n], s.scratch[n])
	}
	copy(s.cl.cards[n], s.scratch[n])
	s.book(n, pod, req, &h)
	return h
}

// book takes the pod's CPU and memory from node n and lets the learner
// see the pod bound there.
func (s *selector) book(n int, pod *Pod, req *request.Request, h *holding) {
	s.cl.cpuLeft[n] -= pod.CPUMilli
	s.cl.memLeft[n] -= pod.MemoryMiB
	h.cpu, h.mem, h.bound = pod.CPUMilli, pod.MemoryMiB, -1
	if s.learner != nil {
		s.learner.Observe(req, pod.CPUMilli)
		h.bound = len(s.bound)
		s.bound = append(s.bound, boundPod{req: req, cpu: pod.CPUMilli})
	}
}

// release gives back what a departing pod held; the learner keeps its
// shape, as the plugin's does (typical.Learner.Forget), but a scheduler
// that starts after the departure no longer finds the pod bound.
func (s *selector) release(h holding) {
	s.cl.cpuLeft[h.node] += h.cpu
	s.cl.memLeft[h.node] += h.mem
	for _, t := range h.cards {
		c := &s.cl.cards[h.node][t.card]
		c.UsedMemoryGiB -= t.mem
		c.UsedCores -= t.cores
		c.UsedGreedy -= t.greedy
		c.General -= t.general
		c.Online -= t.online
		c.Offline -= t.offline
	}
	if h.bound >= 0 {
		s.bound[h.bound].gone = true
	}
}

// holding is what a placed pod holds on its node.
type holding struct {
	node     int
	cpu, mem int64
	// cards is what the pod took of each card (recorded with keep).
	cards []cardTake
	// bound indexes the pod in selector.bound, -1 if not kept there.
	bound int
}

// cardTake is what a pod took of one card.
type cardTake struct {
	card                     int
	mem, cores, greedy       int64
	general, online, offline int
}

// takes is what a pod took of each card, from the cards before and after.
func takes(before, after []ledger.Card) []cardTake {
	var out []cardTake
	for i := range before {
		b, a := &before[i], &after[i]
		t := cardTake{card: i, mem: a.UsedMemoryGiB - b.UsedMemoryGiB, cores: a.UsedCores - b.UsedCores,
			greedy: a.UsedGreedy - b.UsedGreedy, general: a.General - b.General, online: a.Online - b.Online, offline: a.Offline - b.Offline}
		if t != (cardTake{card: i}) {
			out = append(out, t)
		}
	}
	return out
}
