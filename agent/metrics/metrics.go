// Package metrics exports the agent's Prometheus metrics: per card what is
// granted and its health, per container what it was granted, pods by class,
// Allocate outcomes and the online/offline controller's actions
// (docs/metrics.md).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Metrics is the agent's registry (names and units: docs/metrics.md).
type Metrics struct {
	Registry    *prometheus.Registry
	grants      *grants
	usage       *usage
	allocations *prometheus.CounterVec
	// Priority is the online/offline controller's part.
	Priority *Priority
	// MPSGuard counts the processes that bypass MPS (agent/mpsguard).
	MPSGuard *MPSGuard
	dra      dra
}

// New returns the metrics, registered in a fresh registry with the Go and process collectors.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		grants:   &grants{},
		usage:    &usage{},
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "qgpu_allocate_total",
			Help: "Allocate calls answered, by resource and result (granted, refused)."}, []string{"resource", "result"}),
	}
	m.Registry.MustRegister(m.grants, m.usage, m.allocations,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Priority = newPriority(m.Registry)
	m.MPSGuard = newMPSGuard(m.Registry)
	return m
}

// Update replaces the cards and the grant records the card and container
// series are computed from: a grant no longer listed loses its series.
func (m *Metrics) Update(cards []protocol.Card, grants []store.Grant) {
	m.grants.set(cards, grants)
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
