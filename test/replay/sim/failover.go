package sim

import (
	"fmt"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
	learned "github.com/qgpu-scheduler/qgpu/plugins/qgpu/typical"
)

// Failover replaces the scheduler's learner part-way through a replay, as
// a restart or a leader failover replaces the scheduler process: the pods
// placed stay where they are (every pod placed and not yet departed is
// bound), and the new scheduler's learner starts from what it finds.
type Failover struct {
	// Pct is the GPU allocated, in % of capacity, at which the scheduler
	// fails over (after the first pod placed that reaches it); 0: never.
	Pct int
	// Learner is what the new scheduler's learner starts from.
	Learner FailoverLearner
}

// FailoverLearner is what the learner knows after a failover.
type FailoverLearner string

const (
	// Rebuilt counts every pod bound, once, as the plugin does once its
	// informers have synced (plugins/qgpu/learn.go), and publishes the
	// workload at once.
	Rebuilt FailoverLearner = "rebuilt"
	// Cold knows no shape: the plugin before 2026-11-27, which counted
	// neither the pods bound before it started nor, on a standby, the
	// leader's pods.
	Cold FailoverLearner = "cold"
)

// Validate checks the failover against the replay's source of typical
// shapes: only a learner that learns online can be replaced.
func (f Failover) Validate(t Typical) error {
	switch {
	case f.Pct == 0:
		return nil
	case f.Pct < 0 || f.Pct > 100:
		return fmt.Errorf("failover-at %d: want a percentage of capacity, 1 to 100", f.Pct)
	case f.Learner != Rebuilt && f.Learner != Cold:
		return fmt.Errorf("failover-learner %q: want %s or %s", f.Learner, Rebuilt, Cold)
	case t != Online:
		return fmt.Errorf("failover-at needs --typical %s: with shapes from the whole trace the scheduler's learner plays no part", Online)
	}
	return nil
}

func (f Failover) due(allocated, capacity int64) bool {
	return f.Pct > 0 && allocated*100 >= int64(f.Pct)*capacity
}

// boundPod is what a restarted scheduler reads of a bound pod: its request
// (as the plugin parses it from the pod) and its CPU in milli-cores.
type boundPod struct {
	req *request.Request
	cpu int64
	// gone marks a pod that has left (Churn).
	gone bool
}

// failover gives the selector the learner a new scheduler would have.
func (s *selector) failover(from FailoverLearner) {
	l := learned.NewLearner()
	if from == Rebuilt {
		for _, p := range s.bound {
			if !p.gone {
				l.Observe(p.req, p.cpu)
			}
		}
		l.Publish()
	}
	s.learner = l
}
