package placement

// Policy orders cards and nodes for general pods.
type Policy string

const (
	// Binpack fills the fullest card (and node) that fits, keeping others whole.
	Binpack Policy = "binpack"
	// Spread picks the emptiest card (and node), for availability.
	Spread Policy = "spread"
	// BestFit picks the card that fits tightest, and the node with the least
	// resources left over after the pod, GPU and CPU weighed alike.
	BestFit Policy = "bestfit"
	// FGD is Fragmentation Gradient Descent (Weng et al., USENIX ATC'23): the
	// node whose fragmentation, measured against the workload's typical
	// pods, grows least, scored by the paper's truncated sigmoid; the card
	// is the one FGD's score prefers, as the paper's simulator takes it.
	FGD Policy = "fgd"
	// FragFit is FGD's node score, with the node's stranded capacity
	// (Strand: free cards its free CPU cannot carry) counted as fragment
	// too, the tightest card, and a fixed order among the nodes it rates
	// alike instead of kube-scheduler's random pick: for a pod without
	// cards the node with the fewest free cards first, then a fixed node
	// rank (see fragFitRaw). It is the shipped default.
	FragFit Policy = "fragfit"
)

// Policies lists the supported policies, for validation messages.
var Policies = []Policy{Binpack, Spread, BestFit, FGD, FragFit}

// Valid reports whether p names a supported policy.
func (p Policy) Valid() bool {
	for _, q := range Policies {
		if p == q {
			return true
		}
	}
	return false
}

// UsesEnv reports whether the policy looks at the Env; binpack and spread
// look at the cards only.
func (p Policy) UsesEnv() bool { return p != Binpack && p != Spread }

// MeasuresCPUOnly reports whether the policy places pods that take no card
// (the fragmentation-aware ones: such a pod's CPU can strand a node's free
// cards); the others leave them to the scheduler's other plugins.
func (p Policy) MeasuresCPUOnly() bool { return p.fragAware() }

// fragAware reports whether the policy measures fragmentation.
func (p Policy) fragAware() bool { return p == FGD || p == FragFit }

// Env is what the node offers besides its cards, for the policies that look
// at more than the cards (bestfit, fgd, fragfit). All CPU is in milli-cores;
// CPUCap 0 means unknown and CPU is then ignored.
type Env struct {
	// Workload is the target workload (FGD's typical pods); nil or empty
	// makes the fragmentation-aware policies fall back to bestfit.
	Workload *Workload
	// CPULeft is the node's unrequested CPU before the pod, CPUCap its allocatable.
	CPULeft, CPUCap int64
	// PodCPU is the pod's CPU request.
	PodCPU int64
	// Rank is the node's NodeRank, fragfit's last tie-break.
	Rank int64
	// Before, when BeforeKnown, is Frag of the node's cards before the pod,
	// with this env's CPU and workload, as the caller measured or
	// remembered it (the plugin: plugins/qgpu/fragcache); otherwise
	// Evaluate measures it.
	Before      float64
	BeforeKnown bool
	// FragFit switches parts of fragfit off (the trace replay's
	// robustness study); the zero value is fragfit as shipped.
	FragFit FragFitOptions
}

func (e *Env) hasWorkload() bool { return e != nil && e.Workload != nil && len(e.Workload.shapes) > 0 }

func (e *Env) rank() int64 {
	if e == nil {
		return 0
	}
	return e.Rank
}

func (e *Env) cpuLeftAfter() int64 {
	if e == nil {
		return 0
	}
	return e.CPULeft - e.PodCPU
}
