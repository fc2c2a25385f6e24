package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/agent/dra"
	"github.com/qgpu-scheduler/qgpu/agent/nvml/fakespec"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// preparedAs is a checkpoint entry of claim c holding one slice.
func preparedAs(name string, uid types.UID, s protocol.Slice) dra.Prepared {
	return dra.Prepared{UID: uid, Namespace: ns, Name: name,
		Requests: []dra.PreparedRequest{{Request: dra.Request{Name: "gpu", Class: protocol.ClassGeneral, Slices: []protocol.Slice{s}}}}}
}

// TestPreparedChecks: a running claimed pod's claim must be prepared with
// its assignment's slices; a prepared claim no live pod uses is stale; the
// prepared claims of a card must fit its memory.
func TestPreparedChecks(t *testing.T) {
	p, c := claimedOn(t, "p-1", "dra-0", 4, 30, 1)
	as := protocol.Slice{Index: 1, UUID: fakespec.UUID("dra-0", 1), MemoryGiB: 4, Cores: 30}
	cases := []struct {
		name string
		held map[types.UID]dra.Prepared
		want string // the violation's kind; "" none
	}{
		{"prepared as assigned", map[types.UID]dra.Prepared{c.UID: preparedAs(c.Name, c.UID, as)}, ""},
		{"not prepared", map[types.UID]dra.Prepared{}, "UnpreparedClaim"},
		{"prepared on another card", map[types.UID]dra.Prepared{c.UID: preparedAs(c.Name, c.UID, protocol.Slice{Index: 0, UUID: fakespec.UUID("dra-0", 0), MemoryGiB: 4, Cores: 30})}, "PreparedMismatch"},
		{"prepared larger", map[types.UID]dra.Prepared{c.UID: preparedAs(c.Name, c.UID, protocol.Slice{Index: 1, UUID: as.UUID, MemoryGiB: 8, Cores: 30})}, "PreparedMismatch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if v := comparePrepared(p, c, tc.held); v != nil {
				got = v.Kind
			}
			if got != tc.want {
				t.Errorf("violation %q, want %q", got, tc.want)
			}
		})
	}

	held := map[types.UID]dra.Prepared{c.UID: preparedAs(c.Name, c.UID, as), "gone": preparedAs("p-2", "gone", as)}
	if v := stalePrepared("dra-0", held, map[types.UID]bool{c.UID: true}); len(v) != 1 || v[0].Kind != "StalePrepared" {
		t.Errorf("stale: %v, want one StalePrepared for p-2", v)
	}
	if v := stalePrepared("dra-0", held, map[types.UID]bool{c.UID: true, "gone": true}); len(v) != 0 {
		t.Errorf("stale with both used: %v", v)
	}
	capacity := map[string]int64{as.UUID: 8}
	if v := oversubscribedPrepared("dra-0", held, capacity); len(v) != 0 {
		t.Errorf("8 GiB on an 8 GiB card: %v", v)
	}
	held["third"] = preparedAs("p-3", "third", as)
	if v := oversubscribedPrepared("dra-0", held, capacity); len(v) != 1 || v[0].Kind != "OversubscribedPrepared" {
		t.Errorf("12 GiB on an 8 GiB card: %v, want one OversubscribedPrepared", v)
	}
}
