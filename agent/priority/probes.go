package priority

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
)

// DefaultMaxFreeze caps a single freeze of an offline pod's containers by
// the cgroup freezer, whatever its probes. A frozen container answers no
// liveness probe (HTTP, TCP and exec alike: an exec probe's process joins
// the frozen cgroup). The kubelet's default liveness probe (period 10 s,
// timeout 1 s, failureThreshold 3) restarts a container after 3 failed
// probes, which a freeze of (3−1)·10 − 1 = 19 s can never cause; 10 s
// keeps half of that as margin, for probes the controller does not see in
// the pod spec. After a capped freeze the pod runs for a probe break
// (probeCap) before it can be frozen again. The interception mechanism
// needs no cap: it holds back GPU launches only, the process keeps
// answering its probes.
const DefaultMaxFreeze = 10 * time.Second

// minBreak is the least a capped freeze is thawed for.
const minBreak = time.Second

// probeCap returns how long the granted containers of pod may stay frozen
// at once and how long they must then run, from their liveness probes:
// a freeze of W fails at most ⌈(W + timeout)/period⌉ probes, which stays
// below failureThreshold when W ≤ (failureThreshold−1)·period − timeout;
// the break (period + timeout) lets one probe start after the thaw and
// answer, resetting the kubelet's failure count. ok is false when a probe
// tolerates no freeze at all (failureThreshold 1): the freezer must not
// touch that pod. A nil pod (not known yet) gets the default cap.
func probeCap(pod *v1.Pod, containers []string, maxFreeze time.Duration) (capFor, brk time.Duration, ok bool) {
	capFor, brk = maxFreeze, minBreak
	if pod == nil {
		return capFor, brk, true
	}
	for _, ctr := range pod.Spec.Containers {
		if !slices.Contains(containers, ctr.Name) || ctr.LivenessProbe == nil {
			continue
		}
		p := ctr.LivenessProbe
		period := secondsOr(p.PeriodSeconds, 10)
		timeout := secondsOr(p.TimeoutSeconds, 1)
		threshold := int64(p.FailureThreshold)
		if threshold <= 0 {
			threshold = 3
		}
		w := time.Duration(threshold-1)*period - timeout
		if w <= 0 {
			return 0, 0, false
		}
		capFor = min(capFor, w)
		brk = max(brk, period+timeout)
	}
	return capFor, brk, true
}

func secondsOr(s int32, def int64) time.Duration {
	if s <= 0 {
		return time.Duration(def) * time.Second
	}
	return time.Duration(s) * time.Second
}
