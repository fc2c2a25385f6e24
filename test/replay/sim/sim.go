package sim

import (
	"math/rand"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
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
}

// Result is the allocation curve: Alloc[k] is the share of GPU capacity
// allocated (in %) when the arrived GPU demand first reached k% of capacity.
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

// Arrivals is the paper's arrival order: the pods shuffled with the seed,
// then pods drawn at random (with replacement) until the arrived GPU demand
// reaches maxPct% of capacity.
func Arrivals(pods []Pod, capacity int64, maxPct int, rng *rand.Rand) []int {
	order := rng.Perm(len(pods))
	var arrived int64
	limit := capacity * int64(maxPct) / 100
	out := make([]int, 0, len(order)*maxPct/100)
	for i := 0; arrived < limit && len(pods) > 0; i++ {
		p := 0
		if i < len(order) {
			p = order[i]
		} else {
			p = rng.Intn(len(pods))
		}
		out = append(out, p)
		arrived += pods[p].GPUDemand()
	}
	return out
}

// Run replays one configuration.
func Run(cfg Config) Result {
	rng := rand.New(rand.NewSource(cfg.Seed))
	conv := NewConverter(cfg.Mode, cfg.Nodes)
	work := conv.Workload(cfg.Pods)
	cl := newCluster(cfg.Mode, cfg.Nodes)
	var capacity int64
	for i := range cfg.Nodes {
		capacity += int64(cfg.Nodes[i].GPUs) * 1000
	}
	reqs := make([]*request.Request, len(cfg.Pods))
	for i := range cfg.Pods {
		reqs[i] = conv.Request(&cfg.Pods[i])
	}
	ties := cfg.Ties
	if ties == "" {
		ties = FirstNode
	}
	s := newSelector(cl, cfg.Policy, work, rand.New(rand.NewSource(cfg.Seed+1)), ties)
	res := Result{Alloc: make([]float64, cfg.MaxArrivalPct+1)}
	var arrived, allocated int64
	next := 1
	for _, p := range Arrivals(cfg.Pods, capacity, cfg.MaxArrivalPct, rng) {
		pod := &cfg.Pods[p]
		if s.place(pod, reqs[p]) {
			allocated += pod.GPUDemand()
			res.Placed++
		} else {
			res.Failed++
		}
		arrived += pod.GPUDemand()
		for ; next <= cfg.MaxArrivalPct && arrived*100 >= capacity*int64(next); next++ {
			res.Alloc[next] = float64(allocated) * 100 / float64(capacity)
		}
	}
	for ; next <= cfg.MaxArrivalPct; next++ {
		res.Alloc[next] = float64(allocated) * 100 / float64(capacity)
	}
	return res
}
