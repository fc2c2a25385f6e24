package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func TestUpdateAndServe(t *testing.T) {
	m := New()
	cards := []protocol.Card{
		{Index: 0, UUID: "GPU-0", Model: "T4", MemoryMiB: 15109, Healthy: true},
		{Index: 1, UUID: "GPU-1", Model: "T4", MemoryMiB: 15109, Healthy: false},
	}
	s := func(card int, mem, cores int64) []protocol.Slice {
		return []protocol.Slice{{Index: card, UUID: "GPU-" + string(rune('0'+card)), MemoryGiB: mem, Cores: cores}}
	}
	grants := []store.Grant{
		{PodUID: "a", Resource: protocol.ResourceMemory, Class: protocol.ClassGeneral, Slices: s(0, 4, 30)},
		{PodUID: "a", Resource: protocol.ResourceCore, Class: protocol.ClassGeneral, Slices: s(0, 4, 30)},
		{PodUID: "b", Resource: protocol.ResourceMemory, Class: protocol.ClassOffline, Slices: s(0, 2, 50)},
		{PodUID: "b", Resource: protocol.ResourceCoreGreedy, Class: protocol.ClassOffline, Slices: s(0, 2, 50)},
	}
	m.Update(cards, grants)
	checks := []struct {
		got, want float64
		what      string
	}{
		{testutil.ToFloat64(m.memoryGranted.WithLabelValues("0", "GPU-0")), 6, "memory granted card 0"},
		{testutil.ToFloat64(m.memoryGranted.WithLabelValues("1", "GPU-1")), 0, "memory granted card 1"},
		{testutil.ToFloat64(m.coresGranted.WithLabelValues("0", "GPU-0", protocol.ResourceCore)), 30, "cores card 0"},
		{testutil.ToFloat64(m.coresGranted.WithLabelValues("0", "GPU-0", protocol.ResourceCoreGreedy)), 50, "greedy card 0"},
		{testutil.ToFloat64(m.healthy.WithLabelValues("1", "GPU-1", "T4")), 0, "health card 1"},
		{testutil.ToFloat64(m.memoryCapacity.WithLabelValues("0", "GPU-0")), 14, "capacity"},
		{testutil.ToFloat64(m.pods.WithLabelValues("offline")), 1, "offline pods"},
		{testutil.ToFloat64(m.pods.WithLabelValues("online")), 0, "online pods"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
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
	for _, want := range []string{`qgpu_card_memory_granted_gib{card="0",uuid="GPU-0"} 6`, `qgpu_allocate_total{resource="tke.cloud.tencent.com/qgpu-memory",result="refused"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
