package placement

// FragFitOptions switch parts of fragfit off, or reweigh its stranded
// term, for the trace replay's robustness study
// (docs/performance.md#robustness-of-fragfit). The zero value is fragfit as
// shipped; the scheduler never sets them.
type FragFitOptions struct {
	// FGDCard takes, for a pod sharing a card, the card FGD's score
	// prefers instead of the tightest that fits.
	FGDCard bool
	// NoCPUOnlyFit drops the order of a CPU-only pod's tied nodes by least
	// free card capacity.
	NoCPUOnlyFit bool
	// NoStrand drops the stranded capacity (Strand) from the
	// fragmentation fragfit measures.
	NoStrand bool
	// NoRank drops the fixed node order (NodeRank): nodes still tied are
	// left to the caller's pick.
	NoRank bool
	// StrandWeight multiplies the stranded capacity; 0 means 1.
	StrandWeight float64
	// StrandBeforeLeft measures the stranded capacity before the pod
	// against the node's CPU left on every node, as fragfit did until
	// issue 42, instead of against its CPU capacity on a node whose cards
	// are all free (strandBefore).
	StrandBeforeLeft bool
}

// fragFit is the env's options, the shipped ones without an env.
func (e *Env) fragFit() FragFitOptions {
	if e == nil {
		return FragFitOptions{}
	}
	return e.FragFit
}

// strandWeight is the stranded capacity's weight in fragfit's
// fragmentation: 0 without the term.
func (o FragFitOptions) strandWeight() float64 {
	switch {
	case o.NoStrand:
		return 0
	case o.StrandWeight == 0:
		return 1
	}
	return o.StrandWeight
}

// rank is the node's rank as fragfit orders by it: 0 for every node
// without the fixed order.
func (o FragFitOptions) rank(env *Env) int64 {
	if o.NoRank {
		return 0
	}
	return env.rank()
}
