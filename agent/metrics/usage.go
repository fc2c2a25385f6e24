package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	usageLabelNames = []string{"namespace", "pod", "container", "card", "uuid"}

	containerMemoryUsedDesc = prometheus.NewDesc("qgpu_container_memory_used_bytes",
		"Card memory the container's processes hold (contexts, modules, allocations), as HAMi-core's region says, in bytes (hami-core backend).", usageLabelNames, nil)
	containerSMUtilDesc = prometheus.NewDesc("qgpu_container_sm_utilization_ratio",
		"Share of the card's SMs the container's processes used, as HAMi-core's region says (hami-core backend).", usageLabelNames, nil)
	containerLastKernelDesc = prometheus.NewDesc("qgpu_container_last_kernel_timestamp_seconds",
		"When the container last launched a kernel, seconds since the epoch (hami-core backend; time() - this is the time since).", []string{"namespace", "pod", "container"}, nil)
)

// ContainerUsage is what one container uses of its cards.
type ContainerUsage struct {
	Namespace, Pod, Container string
	Cards                     []CardUsage
	LastKernel                time.Time // zero: never launched, or not recorded
}

// CardUsage is a container's use of one card.
type CardUsage struct {
	Index       int
	UUID        string
	MemoryBytes uint64
	SMPercent   uint64
}

// usage is the collector of the containers' usage: it asks its source at
// scrape time, so that a scrape reads the regions as they are.
type usage struct {
	mu     sync.Mutex
	source func() []ContainerUsage
}

var _ prometheus.Collector = (*usage)(nil)

// SetUsageSource makes every scrape report what source returns (nil: nothing).
func (m *Metrics) SetUsageSource(source func() []ContainerUsage) {
	m.usage.mu.Lock()
	defer m.usage.mu.Unlock()
	m.usage.source = source
}

// Describe implements prometheus.Collector.
func (u *usage) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{containerMemoryUsedDesc, containerSMUtilDesc, containerLastKernelDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (u *usage) Collect(ch chan<- prometheus.Metric) {
	u.mu.Lock()
	source := u.source
	u.mu.Unlock()
	if source == nil {
		return
	}
	for _, c := range source() {
		for _, card := range c.Cards {
			labels := []string{c.Namespace, c.Pod, c.Container, strconv.Itoa(card.Index), card.UUID}
			ch <- prometheus.MustNewConstMetric(containerMemoryUsedDesc, prometheus.GaugeValue, float64(card.MemoryBytes), labels...)
			ch <- prometheus.MustNewConstMetric(containerSMUtilDesc, prometheus.GaugeValue, float64(card.SMPercent)/100, labels...)
		}
		if !c.LastKernel.IsZero() {
			ch <- prometheus.MustNewConstMetric(containerLastKernelDesc, prometheus.GaugeValue,
				float64(c.LastKernel.Unix()), c.Namespace, c.Pod, c.Container)
		}
	}
}
