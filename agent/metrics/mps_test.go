package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/qgpu-scheduler/qgpu/agent/mpsguard"
)

// TestMPSGuardSeries: the guard's counts reach the registry as
// docs/metrics.md names them.
func TestMPSGuardSeries(t *testing.T) {
	m := New()
	c := mpsguard.CardID{Index: 1, UUID: "GPU-1"}
	m.MPSGuard.ForeignProcesses(c, 2)
	m.MPSGuard.ForeignProcesses(mpsguard.CardID{Index: 0, UUID: "GPU-0"}, 0)
	m.MPSGuard.Evicted(c)
	want := `
# HELP qgpu_mps_foreign_evictions_total Pods deleted for a process that bypasses MPS on an MPS-shared card (--mps-foreign-process-policy=evict).
# TYPE qgpu_mps_foreign_evictions_total counter
qgpu_mps_foreign_evictions_total{card="1",uuid="GPU-1"} 1
# HELP qgpu_mps_foreign_processes Compute processes on an MPS-shared card that are neither clients of its MPS server nor the server, at the last poll.
# TYPE qgpu_mps_foreign_processes gauge
qgpu_mps_foreign_processes{card="0",uuid="GPU-0"} 0
qgpu_mps_foreign_processes{card="1",uuid="GPU-1"} 2
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "qgpu_mps_foreign_processes", "qgpu_mps_foreign_evictions_total"); err != nil {
		t.Error(err)
	}
}
