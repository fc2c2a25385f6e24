// Package metrics exports the agent's Prometheus metrics: per card what is
// granted and its health, pods by class, and Allocate outcomes.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Metrics is the agent's registry.
type Metrics struct {
	Registry       *prometheus.Registry
	memoryCapacity *prometheus.GaugeVec
	memoryGranted  *prometheus.GaugeVec
	coresGranted   *prometheus.GaugeVec
	healthy        *prometheus.GaugeVec
	pods           *prometheus.GaugeVec
	allocations    *prometheus.CounterVec
	// Priority is the online/offline controller's part.
	Priority *Priority
}

// New returns the metrics, registered in a fresh registry with the Go and process collectors.
func New() *Metrics {
	card := []string{"card", "uuid"}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		memoryCapacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "qgpu_card_memory_capacity_gib",
			Help: "Memory of the card in GiB, as the qgpu-memory resource counts it."}, card),
		memoryGranted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "qgpu_card_memory_granted_gib",
			Help: "qgpu-memory granted on the card (GiB)."}, card),
		coresGranted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "qgpu_card_cores_granted",
			Help: "Cores granted on the card, by resource (qgpu-core or qgpu-core-greedy)."}, append(card, "resource")),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "qgpu_card_healthy",
			Help: "1 if the card is healthy, 0 if not."}, append(card, "model")),
		pods: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "qgpu_pods",
			Help: "Pods holding grants on this node, by class."}, []string{"class"}),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qgpu_allocate_total",
			Help: "Allocate calls answered, by resource and result (granted, refused)."}, []string{"resource", "result"}),
	}
	m.Registry.MustRegister(m.memoryCapacity, m.memoryGranted, m.coresGranted, m.healthy, m.pods, m.allocations,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Priority = newPriority(m.Registry)
	return m
}

// Update recomputes the gauges from the cards and the grant records.
func (m *Metrics) Update(cards []protocol.Card, grants []store.Grant) {
	for _, v := range []*prometheus.GaugeVec{m.memoryCapacity, m.memoryGranted, m.coresGranted, m.healthy, m.pods} {
		v.Reset()
	}
	for _, c := range cards {
		idx := strconv.Itoa(c.Index)
		m.memoryCapacity.WithLabelValues(idx, c.UUID).Set(float64(c.MemoryGiB()))
		m.memoryGranted.WithLabelValues(idx, c.UUID).Set(0)
		h := 0.0
		if c.Healthy {
			h = 1
		}
		m.healthy.WithLabelValues(idx, c.UUID, c.Model).Set(h)
	}
	podClass := map[string]protocol.Class{}
	for _, g := range grants {
		podClass[g.PodUID] = g.Class
		for _, s := range g.Slices {
			idx := strconv.Itoa(s.Index)
			switch g.Resource {
			case protocol.ResourceMemory:
				m.memoryGranted.WithLabelValues(idx, s.UUID).Add(float64(s.MemoryGiB))
			case protocol.ResourceCore, protocol.ResourceCoreGreedy:
				m.coresGranted.WithLabelValues(idx, s.UUID, g.Resource).Add(float64(s.Cores))
			}
		}
	}
	for _, class := range []protocol.Class{protocol.ClassGeneral, protocol.ClassOnline, protocol.ClassOffline} {
		m.pods.WithLabelValues(string(class)).Set(0)
	}
	for _, class := range podClass {
		m.pods.WithLabelValues(string(class)).Inc()
	}
}

// ObserveAllocate counts one Allocate answer.
func (m *Metrics) ObserveAllocate(resource string, err error) {
	result := "granted"
	if err != nil {
		result = "refused"
	}
	m.allocations.WithLabelValues(resource, result).Inc()
}

// Serve serves /metrics, and the handlers of extra by path (the health
// probes), on addr until ctx ends, and returns the address it listens on
// (addr may use port 0).
func (m *Metrics) Serve(ctx context.Context, addr string, extra map[string]http.Handler) (net.Addr, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	for path, h := range extra {
		mux.Handle(path, h)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Metrics server stopped")
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	return lis.Addr(), nil
}
