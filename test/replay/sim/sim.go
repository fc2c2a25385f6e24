package sim

import (
	"math"
	"math/rand"
	"sort"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
	learned "github.com/qgpu-scheduler/qgpu/plugins/qgpu/typical"
)

// Config is one replay: a cluster, a pod list, a policy and a seed.
type Config struct {
	Nodes  []Node
	Pods   []Pod
	Mode   Mode
	Policy placement.Policy
	Seed   int64
	// MaxArrivalPct ends the replay (the paper: 130).
	MaxArrivalPct int
	// Ties picks among equal best nodes; empty means FirstNode.
	Ties TieBreak
	// Typical is where the product's fragmentation-aware policies get the
	// typical pod shapes from; empty means FromTrace. The ports always
	// take them from the trace, as the simulator does.
	Typical Typical
}

// Typical is the source of the typical pod shapes.
type Typical string

const (
	// FromTrace derives them from the whole pod list up front, as the
	// paper's simulator does (Converter.Workload).
	FromTrace Typical = "trace"
	// Online starts with none and learns them from the pods placed, with
	// the scheduler plugin's own learner (plugins/qgpu/typical), as the
	// scheduler does from a cold start.
	Online Typical = "online"
)

// Result is the allocation curve: Alloc[k] is the share of GPU capacity
// allocated (in %) averaged over the arrivals after which the arrived GPU
// demand, in % of capacity, rounds to k (the simulator's "130" is the mean
// over 129.5–130%); a k no arrival rounds to carries the allocation then.
type Result struct {
	Alloc []float64
	// Placed and Failed count arrivals.
	Placed, Failed int
}

// cluster is the replay's state, one entry per node.
type cluster struct {
	nodes   []Node
	cards   [][]ledger.Card
	cpuLeft []int64
	memLeft []int64
}

func newCluster(mode Mode, nodes []Node) *cluster {
	c := &cluster{nodes: nodes, cards: make([][]ledger.Card, len(nodes)),
		cpuLeft: make([]int64, len(nodes)), memLeft: make([]int64, len(nodes))}
	for i := range nodes {
		c.cards[i] = mode.Cards(&nodes[i])
		c.cpuLeft[i], c.memLeft[i] = nodes[i].CPUMilli, nodes[i].MemoryMiB
	}
	return c
}

// Arrivals is the simulator's arrival order: the pods sorted by name and
// shuffled with the seed; then, while the arrived GPU demand stays within
// maxPct% of capacity, pods drawn at random (with replacement) are
// appended; a trace already above it loses random pods instead.
func Arrivals(pods []Pod, capacity int64, maxPct int, rng *rand.Rand) []int {
	byName := make([]int, len(pods))
	for i := range byName {
		byName[i] = i
	}
	sort.SliceStable(byName, func(a, b int) bool { return pods[byName[a]].Name < pods[byName[b]].Name })
	order := make([]int, len(pods))
	for i, j := range rng.Perm(len(pods)) {
		order[i] = byName[j]
	}
	limit := capacity * int64(maxPct) / 100
	var arrived int64
	for _, p := range order {
		arrived += pods[p].GPUDemand()
	}
	for arrived > limit && len(order) > 0 {
		k := rng.Intn(len(order))
		arrived -= pods[order[k]].GPUDemand()
		order = append(order[:k], order[k+1:]...)
	}
	for len(pods) > 0 {
		p := rng.Intn(len(pods))
		if arrived+pods[p].GPUDemand() > limit {
			break
		}
		order = append(order, p)
		arrived += pods[p].GPUDemand()
	}
	return order
}

// NodeOrder is the seed's order of the nodes: the simulator prefixes node
// names with a seeded random string and breaks ties by name, so ties go to
// the first node in a per-seed random order.
func NodeOrder(n int, seed int64) []int {
	return rand.New(rand.NewSource(seed ^ 0x5eed)).Perm(n)
}

// placer is a scheduling cycle: the product's placement or a port.
type placer interface {
	place(pod *Pod, req *request.Request) bool
}

type portPlacer struct{ *portSelector }

func (p portPlacer) place(pod *Pod, _ *request.Request) bool { return p.portSelector.place(pod) }

// Run replays one configuration; a port in qgpu mode is refused by the
// caller (ValidPolicy).
func Run(cfg Config) Result {
	rng := rand.New(rand.NewSource(cfg.Seed))
	conv := NewConverter(cfg.Mode, cfg.Nodes)
	cl := newCluster(cfg.Mode, cfg.Nodes)
	var capacity int64
	for i := range cfg.Nodes {
		capacity += int64(cfg.Nodes[i].GPUs) * 1000
	}
	reqs := make([]*request.Request, len(cfg.Pods))
	for i := range cfg.Pods {
		reqs[i] = conv.Request(&cfg.Pods[i])
	}
	order := NodeOrder(len(cfg.Nodes), cfg.Seed)
	var s placer
	if IsPort(cfg.Policy) {
		s = portPlacer{newPortSelector(cl, cfg.Policy, order, rand.New(rand.NewSource(cfg.Seed+1)), typicalShapes(cfg.Pods))}
	} else {
		ties := cfg.Ties
		if ties == "" {
			ties = FirstNode
		}
		sel := newSelector(cl, cfg.Policy, nil, order, rand.New(rand.NewSource(cfg.Seed+1)), ties)
		if cfg.Typical == Online {
			sel.learner = learned.NewLearner()
		} else {
			sel.work = conv.Workload(cfg.Pods)
		}
		s = sel
	}
	return replay(cfg, s, reqs, rng, capacity)
}

// replay feeds the arrivals to the placer and records the allocation curve.
func replay(cfg Config, s placer, reqs []*request.Request, rng *rand.Rand, capacity int64) Result {
	res := Result{Alloc: make([]float64, cfg.MaxArrivalPct+1)}
	sums := make([]float64, cfg.MaxArrivalPct+1)
	counts := make([]int, cfg.MaxArrivalPct+1)
	var arrived, allocated int64
	for _, p := range Arrivals(cfg.Pods, capacity, cfg.MaxArrivalPct, rng) {
		pod := &cfg.Pods[p]
		if s.place(pod, reqs[p]) {
			allocated += pod.GPUDemand()
			res.Placed++
		} else {
			res.Failed++
		}
		arrived += pod.GPUDemand()
		if k := int(math.Floor(float64(arrived)*100/float64(capacity) + 0.5)); k >= 0 && k <= cfg.MaxArrivalPct {
			sums[k] += float64(allocated) * 100 / float64(capacity)
			counts[k]++
		}
	}
	last := 0.0
	for k := range res.Alloc {
		if counts[k] > 0 {
			last = sums[k] / float64(counts[k])
		}
		res.Alloc[k] = last
	}
	return res
}
