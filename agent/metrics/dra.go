package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// dra is the DRA mode's gauge (agent/dra), registered when first set, so
// that an agent serving device plugins has no such series.
type dra struct {
	once     sync.Once
	capacity prometheus.Gauge
}

// SetDRAConsumableCapacity sets qgpu_dra_consumable_capacity: 1 while the
// node's ResourceSlice reads back with its consumable-capacity fields, 0
// once the API server dropped them (the DRAConsumableCapacity feature gate
// off) and the agent withdrew its devices.
func (m *Metrics) SetDRAConsumableCapacity(intact bool) {
	m.dra.once.Do(func() {
		m.dra.capacity = prometheus.NewGauge(prometheus.GaugeOpts{Name: "qgpu_dra_consumable_capacity",
			Help: "1 if the node's DRA devices read back from the API server with their consumable-capacity fields, 0 if the API server dropped them (DRAConsumableCapacity off) and the agent withdrew the devices."})
		m.Registry.MustRegister(m.dra.capacity)
	})
	v := 0.0
	if intact {
		v = 1
	}
	m.dra.capacity.Set(v)
}
