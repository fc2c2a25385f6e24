package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// bytesPerGiB converts the GiB that pods request to bytes (base units,
// docs/metrics.md).
const bytesPerGiB = 1 << 30

var (
	cardLabelNames      = []string{"card", "uuid"}
	containerLabelNames = []string{"namespace", "pod", "container", "card", "uuid"}

	memoryCapacityDesc = prometheus.NewDesc("qgpu_card_memory_capacity_bytes",
		"Memory of the card as the qgpu-memory resource counts it (whole GiB), in bytes.", cardLabelNames, nil)
	memoryGrantedDesc = prometheus.NewDesc("qgpu_card_memory_granted_bytes",
		"qgpu-memory granted on the card, in bytes.", cardLabelNames, nil)
	coresGrantedDesc = prometheus.NewDesc("qgpu_card_cores_granted_ratio",
		"Share of the card's compute granted (qgpu-core or qgpu-core-greedy / 100), by resource.", append(cardLabelNames, "resource"), nil)
	healthyDesc = prometheus.NewDesc("qgpu_card_healthy",
		"1 if the card is healthy, 0 if not.", append(cardLabelNames, "model"), nil)
	podsDesc = prometheus.NewDesc("qgpu_pods",
		"Pods holding grants on this node, by class.", []string{"class"}, nil)
	containerMemoryDesc = prometheus.NewDesc("qgpu_container_memory_granted_bytes",
		"qgpu-memory granted to the container on the card, in bytes.", containerLabelNames, nil)
	containerCoresDesc = prometheus.NewDesc("qgpu_container_cores_granted_ratio",
		"Share of the card's compute granted to the container (qgpu-core or qgpu-core-greedy / 100), by resource.", append(containerLabelNames, "resource"), nil)
)

// grants is the collector of what the agent has handed out. It keeps the
// last cards and grant records it was given and computes every series from
// them at scrape time, so that a scrape never sees half an update and a
// grant's series go away with the grant.
type grants struct {
	mu     sync.Mutex
	cards  []protocol.Card
	grants []store.Grant
}

var _ prometheus.Collector = (*grants)(nil)

func (g *grants) set(cards []protocol.Card, grants []store.Grant) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cards, g.grants = append([]protocol.Card(nil), cards...), append([]store.Grant(nil), grants...)
}

// Describe implements prometheus.Collector.
func (g *grants) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{memoryCapacityDesc, memoryGrantedDesc, coresGrantedDesc, healthyDesc, podsDesc, containerMemoryDesc, containerCoresDesc} {
		ch <- d
	}
}

// series sums values by their label values: two records can name the same
// series (a pod re-created under its name while the old grant is still
// held), which Prometheus refuses as duplicates.
type series struct {
	keys   []string
	labels map[string][]string
	values map[string]float64
}

func newSeries() *series { return &series{labels: map[string][]string{}, values: map[string]float64{}} }

func (s *series) add(v float64, labels ...string) {
	key := ""
	for _, l := range labels {
		key += strconv.Quote(l)
	}
	if _, ok := s.labels[key]; !ok {
		s.keys = append(s.keys, key)
		s.labels[key] = labels
	}
	s.values[key] += v
}

func (s *series) emit(ch chan<- prometheus.Metric, d *prometheus.Desc) {
	for _, k := range s.keys {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, s.values[k], s.labels[k]...)
	}
}

// Collect implements prometheus.Collector.
func (g *grants) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	cards, grants := g.cards, g.grants
	g.mu.Unlock()
	capacity, granted, cores, healthy := newSeries(), newSeries(), newSeries(), newSeries()
	for _, c := range cards {
		idx := strconv.Itoa(c.Index)
		capacity.add(float64(c.MemoryGiB()*bytesPerGiB), idx, c.UUID)
		granted.add(0, idx, c.UUID)
		h := 0.0
		if c.Healthy {
			h = 1
		}
		healthy.add(h, idx, c.UUID, c.Model)
	}
	pods := newSeries()
	for _, class := range []protocol.Class{protocol.ClassGeneral, protocol.ClassOnline, protocol.ClassOffline} {
		pods.add(0, string(class))
	}
	podClass := map[string]protocol.Class{}
	containerMemory, containerCores := newSeries(), newSeries()
	for _, gr := range grants {
		podClass[gr.PodUID] = gr.Class
		for _, s := range gr.Slices {
			idx := strconv.Itoa(s.Index)
			switch gr.Resource {
			case protocol.ResourceMemory:
				granted.add(float64(s.MemoryGiB*bytesPerGiB), idx, s.UUID)
				containerMemory.add(float64(s.MemoryGiB*bytesPerGiB), gr.Namespace, gr.Name, gr.Container, idx, s.UUID)
			case protocol.ResourceCore, protocol.ResourceCoreGreedy:
				ratio := float64(s.Cores) / protocol.CoresPerCard
				cores.add(ratio, idx, s.UUID, gr.Resource)
				containerCores.add(ratio, gr.Namespace, gr.Name, gr.Container, idx, s.UUID, gr.Resource)
			}
		}
	}
	for _, class := range podClass {
		pods.add(1, string(class))
	}
	capacity.emit(ch, memoryCapacityDesc)
	granted.emit(ch, memoryGrantedDesc)
	cores.emit(ch, coresGrantedDesc)
	healthy.emit(ch, healthyDesc)
	pods.emit(ch, podsDesc)
	containerMemory.emit(ch, containerMemoryDesc)
	containerCores.emit(ch, containerCoresDesc)
}
