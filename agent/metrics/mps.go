package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/qgpu-scheduler/qgpu/agent/mpsguard"
)

// MPSGuard is the metrics of the processes that bypass MPS on an
// MPS-shared card (agent/mpsguard); it implements mpsguard.Observer.
type MPSGuard struct {
	foreign   *prometheus.GaugeVec
	evictions *prometheus.CounterVec
}

var _ mpsguard.Observer = (*MPSGuard)(nil)

func newMPSGuard(reg prometheus.Registerer) *MPSGuard {
	card := []string{"card", "uuid"}
	g := &MPSGuard{
		foreign: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "qgpu_mps_foreign_processes",
			Help: "Compute processes on an MPS-shared card that are neither clients of its MPS server nor the server, at the last poll."}, card),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qgpu_mps_foreign_evictions_total",
			Help: "Pods deleted for a process that bypasses MPS on an MPS-shared card (--mps-foreign-process-policy=evict)."}, card),
	}
	reg.MustRegister(g.foreign, g.evictions)
	return g
}

func mpsCardLabels(c mpsguard.CardID) []string { return []string{strconv.Itoa(c.Index), c.UUID} }

// ForeignProcesses implements mpsguard.Observer.
func (g *MPSGuard) ForeignProcesses(c mpsguard.CardID, n int) {
	g.foreign.WithLabelValues(mpsCardLabels(c)...).Set(float64(n))
}

// Evicted implements mpsguard.Observer.
func (g *MPSGuard) Evicted(c mpsguard.CardID) {
	g.evictions.WithLabelValues(mpsCardLabels(c)...).Inc()
}
