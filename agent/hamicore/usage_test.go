package hamicore

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
	"github.com/qgpu-scheduler/qgpu/agent/metrics"
)

// TestUsage: a live container reports its processes' memory and SM use by
// the node's card index, and its last kernel; a container whose processes
// are gone, or that has no region yet, reports nothing.
func TestUsage(t *testing.T) {
	n := newNode(t)
	live := n.container(t, "live", 41, true, hamiregion.Image{}, cardB, cardA)
	n.container(t, "dead", 42, false, hamiregion.Image{}, cardA)
	n.container(t, "fresh", 0, false, hamiregion.Image{}, cardA)
	n.grants[0].Namespace, n.grants[0].Name = "ns", "live-pod"
	n.grants[0].Slices[0].Index, n.grants[0].Slices[1].Index = 3, 1
	p1 := hamiregion.Proc{PID: 1, HostPID: 41, Status: 1}
	p1.MemoryUsed[0], p1.SMUtil[0] = 1<<30, 20
	p2 := hamiregion.Proc{PID: 2, HostPID: 41, Status: 1}
	p2.MemoryUsed[0], p2.MemoryUsed[1], p2.SMUtil[1] = 1<<29, 2<<30, 7
	im := hamiregion.Image{UUIDs: []string{cardB, cardA}, Procs: []hamiregion.Proc{p1, p2}, LastKernelTime: 1_790_000_000}
	if err := im.WriteFile(live); err != nil {
		t.Fatal(err)
	}
	got := n.keeper(t).Usage()
	want := []metrics.ContainerUsage{{Namespace: "ns", Pod: "live-pod", Container: "c", LastKernel: time.Unix(1_790_000_000, 0),
		Cards: []metrics.CardUsage{
			{Index: 3, UUID: cardB, MemoryBytes: 1<<30 + 1<<29, SMPercent: 20},
			{Index: 1, UUID: cardA, MemoryBytes: 2 << 30, SMPercent: 7},
		}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}
