package sim

import (
	"cmp"
	"math"
	"math/rand"
	"slices"
	"sort"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
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
	// Classes mixes online and offline pods in (qgpu mode only).
	Classes Classes
	// Typical is where the product's fragmentation-aware policies get the
	// typical pod shapes from; empty means FromTrace. The ports always
	// take them from the trace, as the simulator does.
	Typical Typical
	// Failover, when its Pct is set, replaces the learner (Typical Online
	// only) once the GPU allocated reaches Pct % of capacity, as a
	// scheduler restart or a leader failover does (failover.go).
	Failover Failover
	// FragFit switches parts of fragfit off or reweighs its stranded term
	// (the robustness study); the zero value is fragfit as shipped.
	FragFit placement.FragFitOptions
	// DefaultCPUPct is the share, in %, of the CPU-only pods that
	// kube-scheduler's default profile places instead of the policy
	// (kubedefault.go), as in a cluster where they are not sent to
	// qgpu-scheduler.
	DefaultCPUPct int
	// Churn, when on, replaces the paper's protocol by arrivals and
	// departures measured in steady state (churn.go).
	Churn Churn
	// SaltRank salts fragfit's fixed node rank with the seed, so that the
	// order among the nodes it rates alike changes from seed to seed as
	// the arrivals do (the shipped rank is a hash of the name alone).
	SaltRank bool
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
	// Placed and Failed count arrivals; ClassFailed the online and
	// offline pods among the failed.
	Placed, Failed, ClassFailed int
	// FailedOver is the arrival (index in the arrival order) after which
	// the learner was replaced; -1 if it never was.
	FailedOver int
	// Steady is the churn replay's measure; nil, and Alloc empty, unless
	// Config.Churn is on.
	Steady *Steady
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

// Arrivals is the simulator's arrival order, drawn from rng as its
// Simulate, SortClusterPods and TunePodsByNodeTotalResource draw from the
// seeded global source (pkg/simulator/core.go and simulator.go): one Int
// (the seed's debug log line), the pods sorted by name then shuffled
// (rand.Shuffle); then, while the arrived GPU demand stays within maxPct%
// of capacity, pods drawn at random (with replacement) from the
// name-sorted trace are appended (tuneUpPods: it stops at the first pod
// whose per-card GPU milli would pass the limit, and counts the pod's
// whole demand), or a trace already above it loses random pods
// (tuneDownPods). The same seed gives the simulator's own order.
func Arrivals(pods []Pod, capacity int64, maxPct int, rng *rand.Rand) []int {
	rng.Int()
	byName := sortedBy(len(pods), func(i int) string { return pods[i].Name })
	order := slices.Clone(byName)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	limit := float64(capacity) * float64(maxPct) / 100
	var arrived int64
	for _, p := range order {
		arrived += pods[p].GPUDemand()
	}
	for float64(arrived) > limit && len(order) > 0 {
		k := rng.Intn(len(order))
		arrived -= pods[order[k]].GPUDemand()
		order = append(order[:k], order[k+1:]...)
	}
	for float64(arrived) < limit && len(pods) > 0 {
		p := byName[rng.Intn(len(pods))]
		if float64(arrived+pods[p].GPUMilli) > limit {
			break
		}
		order = append(order, p)
		arrived += pods[p].GPUDemand()
	}
	return order
}

// NodeOrder is the seed's order of the nodes, drawn from rng after
// Arrivals as the simulator draws it: runScheduler starts kube-scheduler's
// informers, each of which draws once from the same global source when it
// opens its first watch (client-go's reflector: the watch timeout), ten
// draws (informerDraws); then syncClusterResourceList sorts the nodes by
// name and prefixes node i of them with rand.Perm's i-th number. Ties go
// to the smallest name, so to the smallest prefix.
func NodeOrder(nodes []Node, rng *rand.Rand) []int {
	for range informerDraws {
		rng.Int63()
	}
	byName := sortedBy(len(nodes), func(i int) string { return nodes[i].Name })
	order := make([]int, len(nodes))
	for i, prefix := range rng.Perm(len(nodes)) {
		order[prefix] = byName[i]
	}
	return order
}

// informerDraws is the number of those draws: ten reproduces the
// simulator's published per-seed results (docs/performance.md
// #validating-the-replay), and is as many informers as kube-scheduler 1.20
// starts for the simulator's profile by our count (pods, nodes, CSI nodes,
// persistent volumes and claims, services, replication controllers,
// replica sets, stateful sets, pod disruption budgets; storage classes
// were started before the seed).
const informerDraws = 10

// sortedBy is the indexes 0..n-1 sorted by key.
func sortedBy(n int, key func(int) string) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return key(idx[a]) < key(idx[b]) })
	return idx
}

// placer is a scheduling cycle: the product's placement or a port.
type placer interface {
	place(pod *Pod, req *request.Request) bool
}

type portPlacer struct{ *portSelector }

func (p portPlacer) place(pod *Pod, _ *request.Request) bool { return p.portSelector.place(pod) }

// Run replays one configuration; a port in qgpu mode, or with churn or
// CPU-only pods placed by kube-scheduler's default profile, is refused by
// the caller.
func Run(cfg Config) Result {
	rng := rand.New(rand.NewSource(cfg.Seed))
	conv := NewConverter(cfg.Mode, cfg.Nodes)
	cl := newCluster(cfg.Mode, cfg.Nodes)
	var capacity int64
	for i := range cfg.Nodes {
		capacity += int64(cfg.Nodes[i].GPUs) * 1000
	}
	reqs := make([]*request.Request, len(cfg.Pods))
	var general []Pod // the workload FGD measures: the scheduler learns it from general pods
	for i := range cfg.Pods {
		class := cfg.Classes.class(&cfg.Pods[i])
		reqs[i] = asClass(conv.Request(&cfg.Pods[i]), class)
		if class == protocol.ClassGeneral {
			general = append(general, cfg.Pods[i])
		}
	}
	var arrivals []int
	var timed []arrival
	if cfg.Churn.On() {
		timed = churnArrivals(cfg.Pods, capacity, cfg.Churn, rng)
	} else {
		arrivals = Arrivals(cfg.Pods, capacity, cfg.MaxArrivalPct, rng)
	}
	order := NodeOrder(cfg.Nodes, rng)
	if IsPort(cfg.Policy) {
		return replay(cfg, portPlacer{newPortSelector(cl, cfg.Policy, order, rng, typicalShapes(cfg.Pods))}, reqs, arrivals, capacity)
	}
	sel := newSelector(cl, cfg.Policy, nil, order, rand.New(rand.NewSource(cfg.Seed+1)), cmp.Or(cfg.Ties, FirstNode))
	sel.mixed, sel.mixedAlike = cfg.Classes.mixedNodes(cfg.Nodes), cfg.Classes.MixedAlike
	sel.fragFit, sel.defaultPct, sel.keep = cfg.FragFit, cfg.DefaultCPUPct, cfg.Churn.On()
	sel.kubeRng = rand.New(rand.NewSource(cfg.Seed + 2))
	if cfg.SaltRank {
		sel.saltRanks(cfg.Seed)
	}
	if cfg.Typical == Online {
		sel.learner = learned.NewLearner()
	} else {
		sel.work = conv.Workload(general)
	}
	if cfg.Churn.On() {
		return replayChurn(cfg, sel, reqs, timed, capacity)
	}
	return replay(cfg, sel, reqs, arrivals, capacity)
}

// replay feeds the arrivals to the placer and records the allocation curve.
func replay(cfg Config, s placer, reqs []*request.Request, arrivals []int, capacity int64) Result {
	res := Result{Alloc: make([]float64, cfg.MaxArrivalPct+1), FailedOver: -1}
	sums := make([]float64, cfg.MaxArrivalPct+1)
	counts := make([]int, cfg.MaxArrivalPct+1)
	var arrived, allocated int64
	for i, p := range arrivals {
		pod := &cfg.Pods[p]
		if s.place(pod, reqs[p]) {
			allocated += pod.GPUDemand()
			res.Placed++
			if sel, ok := s.(*selector); ok && sel.learner != nil && res.FailedOver < 0 && cfg.Failover.due(allocated, capacity) {
				sel.failover(cfg.Failover.Learner)
				res.FailedOver = i
			}
		} else {
			res.Failed++
			if reqs[p].Class != protocol.ClassGeneral {
				res.ClassFailed++
			}
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
