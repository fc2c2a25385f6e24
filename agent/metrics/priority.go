package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/qgpu-scheduler/qgpu/agent/priority"
)

// Priority is the online/offline controller's metrics; it implements
// priority.Observer.
type Priority struct {
	suspensions *prometheus.CounterVec
	resumptions *prometheus.CounterVec
	suspend     *prometheus.HistogramVec
	resume      *prometheus.HistogramVec
	frozen      *prometheus.GaugeVec
	nvmlErrors  *prometheus.CounterVec
}

var _ priority.Observer = (*Priority)(nil)

func newPriority(reg prometheus.Registerer) *Priority {
	card := []string{"card", "uuid"}
	reason := append(card, "reason")
	// Suspend latency is microseconds to a poll; resume latency sits just past the idle time.
	fine := []float64{.0001, .0005, .001, .002, .005, .01, .02, .05, .1, .2}
	around := []float64{.05, .1, .105, .11, .12, .15, .2, .3, .5, 1}
	p := &Priority{
		suspensions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qgpu_priority_suspensions_total",
			Help: "Offline pods frozen, by reason (online-busy, time-slice)."}, reason),
		resumptions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qgpu_priority_resumptions_total",
			Help: "Offline pods thawed, by the reason they had been frozen for."}, reason),
		suspend: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "qgpu_priority_suspend_seconds",
			Help: "From the start of the poll that saw an online pod busy to the offline pod's freeze written.", Buckets: fine}, card),
		resume: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "qgpu_priority_resume_seconds",
			Help: "From the first poll that saw the online pods idle to the offline pod's thaw written (at least --priority-idle).", Buckets: around}, card),
		frozen: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "qgpu_priority_frozen_pods",
			Help: "Offline pods frozen now."}, card),
		nvmlErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qgpu_priority_nvml_errors_total",
			Help: "Polls whose GPU activity query failed; the card's offline pods were thawed (fail open)."}, card),
	}
	reg.MustRegister(p.suspensions, p.resumptions, p.suspend, p.resume, p.frozen, p.nvmlErrors)
	return p
}

func cardLabels(c priority.CardID) []string { return []string{strconv.Itoa(c.Index), c.UUID} }

// Suspended implements priority.Observer.
func (p *Priority) Suspended(c priority.CardID, reason string, latency time.Duration) {
	p.suspensions.WithLabelValues(append(cardLabels(c), reason)...).Inc()
	if reason == priority.ReasonOnlineBusy {
		p.suspend.WithLabelValues(cardLabels(c)...).Observe(latency.Seconds())
	}
}

// Resumed implements priority.Observer. A zero latency (the online pod went
// away, NVML failed, shutdown) is not an idle-driven resume and is not observed.
func (p *Priority) Resumed(c priority.CardID, reason string, latency time.Duration) {
	p.resumptions.WithLabelValues(append(cardLabels(c), reason)...).Inc()
	if reason == priority.ReasonOnlineBusy && latency > 0 {
		p.resume.WithLabelValues(cardLabels(c)...).Observe(latency.Seconds())
	}
}

// FrozenPods implements priority.Observer.
func (p *Priority) FrozenPods(c priority.CardID, n int) {
	p.frozen.WithLabelValues(cardLabels(c)...).Set(float64(n))
}

// NVMLError implements priority.Observer.
func (p *Priority) NVMLError(c priority.CardID) {
	p.nvmlErrors.WithLabelValues(cardLabels(c)...).Inc()
}
