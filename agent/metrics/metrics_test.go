package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

var testCards = []protocol.Card{
	{Index: 0, UUID: "GPU-0", Model: "T4", MemoryMiB: 15109, Healthy: true},
	{Index: 1, UUID: "GPU-1", Model: "T4", MemoryMiB: 15109, Healthy: false},
}

func slice(card int, mem, cores int64) []protocol.Slice {
	return []protocol.Slice{{Index: card, UUID: "GPU-" + string(rune('0'+card)), MemoryGiB: mem, Cores: cores}}
}

// grant is one record of container c of pod uid (namespace ns, name pod).
func grant(uid, ns, pod, c, resource string, class protocol.Class, s []protocol.Slice) store.Grant {
	return store.Grant{PodUID: uid, Namespace: ns, Name: pod, Container: c, Resource: resource, Class: class, Slices: s}
}

var testGrants = []store.Grant{
	grant("a", "team-a", "a", "main", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 4, 30)),
	grant("a", "team-a", "a", "main", protocol.ResourceCore, protocol.ClassGeneral, slice(0, 4, 30)),
	grant("b", "team-b", "b", "c", protocol.ResourceMemory, protocol.ClassOffline, slice(0, 2, 50)),
	grant("b", "team-b", "b", "c", protocol.ResourceCoreGreedy, protocol.ClassOffline, slice(0, 2, 50)),
}

func TestCardAndContainerSeries(t *testing.T) {
	m := New()
	m.Update(testCards, testGrants)
	want := `
# HELP qgpu_card_cores_granted_ratio Share of the card's compute granted (qgpu-core or qgpu-core-greedy / 100), by resource.
# TYPE qgpu_card_cores_granted_ratio gauge
qgpu_card_cores_granted_ratio{card="0",resource="tke.cloud.tencent.com/qgpu-core",uuid="GPU-0"} 0.3
qgpu_card_cores_granted_ratio{card="0",resource="tke.cloud.tencent.com/qgpu-core-greedy",uuid="GPU-0"} 0.5
# HELP qgpu_card_memory_capacity_bytes Memory of the card as the qgpu-memory resource counts it (whole GiB), in bytes.
# TYPE qgpu_card_memory_capacity_bytes gauge
qgpu_card_memory_capacity_bytes{card="0",uuid="GPU-0"} 1.5032385536e+10
qgpu_card_memory_capacity_bytes{card="1",uuid="GPU-1"} 1.5032385536e+10
# HELP qgpu_card_memory_granted_bytes qgpu-memory granted on the card, in bytes.
# TYPE qgpu_card_memory_granted_bytes gauge
qgpu_card_memory_granted_bytes{card="0",uuid="GPU-0"} 6.442450944e+09
qgpu_card_memory_granted_bytes{card="1",uuid="GPU-1"} 0
# HELP qgpu_card_healthy 1 if the card is healthy, 0 if not.
# TYPE qgpu_card_healthy gauge
qgpu_card_healthy{card="0",model="T4",uuid="GPU-0"} 1
qgpu_card_healthy{card="1",model="T4",uuid="GPU-1"} 0
# HELP qgpu_container_cores_granted_ratio Share of the card's compute granted to the container (qgpu-core or qgpu-core-greedy / 100), by resource.
# TYPE qgpu_container_cores_granted_ratio gauge
qgpu_container_cores_granted_ratio{card="0",container="c",namespace="team-b",pod="b",resource="tke.cloud.tencent.com/qgpu-core-greedy",uuid="GPU-0"} 0.5
qgpu_container_cores_granted_ratio{card="0",container="main",namespace="team-a",pod="a",resource="tke.cloud.tencent.com/qgpu-core",uuid="GPU-0"} 0.3
# HELP qgpu_container_memory_granted_bytes qgpu-memory granted to the container on the card, in bytes.
# TYPE qgpu_container_memory_granted_bytes gauge
qgpu_container_memory_granted_bytes{card="0",container="c",namespace="team-b",pod="b",uuid="GPU-0"} 2.147483648e+09
qgpu_container_memory_granted_bytes{card="0",container="main",namespace="team-a",pod="a",uuid="GPU-0"} 4.294967296e+09
# HELP qgpu_pods Pods holding grants on this node, by class.
# TYPE qgpu_pods gauge
qgpu_pods{class="general"} 1
qgpu_pods{class="offline"} 1
qgpu_pods{class="online"} 0
`
	names := []string{"qgpu_card_cores_granted_ratio", "qgpu_card_memory_capacity_bytes", "qgpu_card_memory_granted_bytes",
		"qgpu_card_healthy", "qgpu_container_cores_granted_ratio", "qgpu_container_memory_granted_bytes", "qgpu_pods"}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// A grant's container series go away with the grant; records that name
// the same series (a pod re-created under its name while its old grant is
// still held) add up instead of failing the scrape.
func TestContainerSeriesFollowGrants(t *testing.T) {
	cases := []struct {
		name   string
		grants []store.Grant
		want   string
	}{
		{"pod b's grant released", testGrants[:2], `
qgpu_container_memory_granted_bytes{card="0",container="main",namespace="team-a",pod="a",uuid="GPU-0"} 4.294967296e+09
`},
		{"no grant left", nil, ""},
		{"same name, two UIDs", []store.Grant{
			grant("old", "team-a", "a", "main", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 4, 30)),
			grant("new", "team-a", "a", "main", protocol.ResourceMemory, protocol.ClassGeneral, slice(0, 2, 30)),
		}, `
qgpu_container_memory_granted_bytes{card="0",container="main",namespace="team-a",pod="a",uuid="GPU-0"} 6.442450944e+09
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := New()
			m.Update(testCards, testGrants)
			m.Update(testCards, tc.grants)
			want := ""
			if tc.want != "" {
				want = "# HELP qgpu_container_memory_granted_bytes qgpu-memory granted to the container on the card, in bytes.\n" +
					"# TYPE qgpu_container_memory_granted_bytes gauge" + tc.want
			}
			if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "qgpu_container_memory_granted_bytes"); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestServe(t *testing.T) {
	m := New()
	m.Update(testCards, testGrants)
	m.ObserveAllocate(protocol.ResourceMemory, nil)
	m.ObserveAllocate(protocol.ResourceMemory, errors.New("no"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := m.Serve(ctx, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`qgpu_card_memory_granted_bytes{card="0",uuid="GPU-0"} 6.442450944e+09`,
		`qgpu_allocate_total{resource="tke.cloud.tencent.com/qgpu-memory",result="refused"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestUsageSeries: the containers' usage in base units (bytes, a ratio,
// a timestamp), asked of the source at every scrape; no source, no series.
func TestUsageSeries(t *testing.T) {
	m := New()
	names := []string{"qgpu_container_memory_used_bytes", "qgpu_container_sm_utilization_ratio", "qgpu_container_last_kernel_timestamp_seconds"}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(""), names...); err != nil {
		t.Errorf("without a source: %v", err)
	}
	used := uint64(3 << 30)
	m.SetUsageSource(func() []ContainerUsage {
		return []ContainerUsage{
			{Namespace: "team-a", Pod: "a", Container: "main", LastKernel: time.Unix(1_790_000_000, 0),
				Cards: []CardUsage{{Index: 1, UUID: "GPU-1", MemoryBytes: used, SMPercent: 35}}},
			{Namespace: "team-b", Pod: "b", Container: "c", Cards: []CardUsage{{Index: 0, UUID: "GPU-0"}}},
		}
	})
	want := `
# HELP qgpu_container_last_kernel_timestamp_seconds When the container last launched a kernel, seconds since the epoch (hami-core backend; time() - this is the time since).
# TYPE qgpu_container_last_kernel_timestamp_seconds gauge
qgpu_container_last_kernel_timestamp_seconds{container="main",namespace="team-a",pod="a"} 1.79e+09
# HELP qgpu_container_memory_used_bytes Card memory the container's processes hold (contexts, modules, allocations), as HAMi-core's region says, in bytes (hami-core backend).
# TYPE qgpu_container_memory_used_bytes gauge
qgpu_container_memory_used_bytes{card="0",container="c",namespace="team-b",pod="b",uuid="GPU-0"} 0
qgpu_container_memory_used_bytes{card="1",container="main",namespace="team-a",pod="a",uuid="GPU-1"} 3.221225472e+09
# HELP qgpu_container_sm_utilization_ratio Share of the card's SMs the container's processes used, as HAMi-core's region says (hami-core backend).
# TYPE qgpu_container_sm_utilization_ratio gauge
qgpu_container_sm_utilization_ratio{card="0",container="c",namespace="team-b",pod="b",uuid="GPU-0"} 0
qgpu_container_sm_utilization_ratio{card="1",container="main",namespace="team-a",pod="a",uuid="GPU-1"} 0.35
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}
