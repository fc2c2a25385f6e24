package qgpu

import (
	"errors"
	"strings"
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/fastpath"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/quota"
)

// The scheduler's qGPU metrics (docs/metrics.md), registered in
// component-base's legacy registry as kube-scheduler's own are, so that its
// /metrics serves them. Counters have fixed label sets, resolved once:
// Filter, which runs for every node of every cycle, counts with one map
// lookup and one atomic add, and allocates nothing. Pool gauges are
// computed from the ledger at scrape time (poolCollector), never in
// Filter or Score.
const (
	metricsNamespace = "qgpu"
	metricsSubsystem = "scheduler"

	pointPreFilter = "PreFilter"
	pointFilter    = "Filter"
	pointReserve   = "Reserve"
	// reasonInvalidRequest is PreFilter's: the pod's qGPU request cannot
	// be parsed (the event says why; the metric keeps one label value).
	reasonInvalidRequest = "invalid qGPU request"
	// reasonClaimPending: a claim not created yet, or still allocated.
	reasonClaimPending = "ResourceClaim not ready"
	// reasonOther counts a reason missing from rejectionReasons (a bug:
	// every reason the plugin reports is constant).
	reasonOther = "other"
	// reasonQuota counts pods kept off cards by their namespace's qGPU
	// quota (the event's reason names the namespace, model, use and limit).
	reasonQuota = "namespace over its qGPU quota"
)

var (
	placementsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "placements_total",
		Help:           "qGPU pods placed (their assignment written with the binding or by PreBind), by class and the profile's node and card policies.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"class", "node_policy", "card_policy"})
	rejectionsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "rejections_total",
		Help:           "Rejections by the QGPU plugin, by extension point (PreFilter: a pod whose request is invalid, per cycle; Filter: a node turned away, per node and cycle; Reserve: the chosen node lost the room) and reason (the constant reasons of FailedScheduling events).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"extension_point", "reason"})
	overbookedTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "overbooked_total",
		Help:           "Bound qGPU pods the informer showed beyond a rule of a card they hold a slice of (recorded all the same, with a QGPUOverbooked event on the pod), by rule (memory, pods, cores, greedy, class). Should stay 0.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"rule"})
)

// rejectionReasons are every reason Filter and Reserve report.
func rejectionReasons() []string {
	r := []string{placement.ReasonNoCards, placement.ReasonNotMixed, placement.ReasonNoModel, placement.ReasonCardsFull,
		placement.ReasonWholeCards, placement.ReasonClassOnCard, ReasonNotQGPUNode, ReasonNoInventory, ledger.ErrNoFit.Error(), reasonQuota,
		ReasonNodeNotEmpty, reasonOther}
	return append(r, fastpath.InsufficientReasons()...)
}

// rejections are the counters of every (extension point, reason), resolved
// after registration (component-base hands out no-op counters before).
type rejections map[string]map[string]metrics.CounterMetric

var registered struct {
	once       sync.Once
	rejections rejections
	pools      *poolCollector
}

// registerMetrics registers the metrics once per process.
func registerMetrics() {
	registered.once.Do(func() {
		registered.pools = newPoolCollector()
		legacyregistry.MustRegister(placementsTotal, rejectionsTotal, overbookedTotal)
		legacyregistry.CustomMustRegister(registered.pools)
		for _, r := range ledger.Rules {
			overbookedTotal.WithLabelValues(string(r)) // exported at 0 from the start
		}
		registered.rejections = rejections{}
		for point, reasons := range map[string][]string{
			pointPreFilter: {reasonInvalidRequest, reasonClaimPending, reasonQuota, reasonBindUncertain, reasonOther},
			pointFilter:    rejectionReasons(),
			pointReserve:   rejectionReasons(),
		} {
			registered.rejections[point] = map[string]metrics.CounterMetric{}
			for _, r := range reasons {
				registered.rejections[point][r] = rejectionsTotal.WithLabelValues(point, r)
			}
		}
	})
}

// rejected counts one rejection; it allocates nothing.
func (r rejections) rejected(point, reason string) {
	c, ok := r[point][reason]
	if !ok {
		c = r[point][reasonOther]
	}
	c.Inc()
}

// reserveReason is the constant reason of a Reserve failure: Reserve's
// error adds the node's inventory fault to ReasonNoInventory.
func reserveReason(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, ledger.ErrNoFit):
		return ledger.ErrNoFit.Error()
	case strings.HasPrefix(msg, ReasonNoInventory):
		return ReasonNoInventory
	case errors.As(err, new(quota.Exceeded)):
		return reasonQuota
	}
	return msg
}

// placementCounters are a profile's placement counters by class.
type placementCounters [3]metrics.CounterMetric

func newPlacementCounters(nodePolicy, cardPolicy placement.Policy) *placementCounters {
	var c placementCounters
	for i, class := range []protocol.Class{protocol.ClassGeneral, protocol.ClassOnline, protocol.ClassOffline} {
		c[i] = placementsTotal.WithLabelValues(string(class), string(nodePolicy), string(cardPolicy))
	}
	return &c
}

func (c *placementCounters) placed(class protocol.Class) {
	switch class {
	case protocol.ClassOnline:
		c[1].Inc()
	case protocol.ClassOffline:
		c[2].Inc()
	default:
		c[0].Inc()
	}
}
