package qgpu

import (
	"testing"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestClaimsRecordEveryCapacity: an allocation's consumedCapacity names
// both capacities of the device, cores 0 for an online claim, as the
// upstream allocator records every capacity (the default where the claim
// asks for none). The agent refuses a result without cores (agent/dra
// resultSlice): make e2e-node's online claim never started until the
// scheduler wrote cores 0.
func TestClaimsRecordEveryCapacity(t *testing.T) {
	for _, tc := range []struct {
		class protocol.Class
		cores string
		want  int64
	}{{protocol.ClassOnline, "", 0}, {protocol.ClassOffline, "50", 50}, {protocol.ClassGeneral, "30", 30}} {
		t.Run(string(tc.class), func(t *testing.T) {
			c := draClaim("c", tc.class, "2Gi", tc.cores)
			p := draWorld(t, c)
			node := t4Node("n1", 1, true)
			p.setNodes(node)
			if got, st := schedule(t, p, draPod("p", "c"), node); !st.IsSuccess() || got != "n1" {
				t.Fatalf("%v %v", got, st)
			}
			a := readClaim(t, p, "c").Status.Allocation
			if a == nil || len(a.Devices.Results) != 1 {
				t.Fatalf("allocation %+v", a)
			}
			consumed := a.Devices.Results[0].ConsumedCapacity
			cores, ok := consumed[protocol.DRACapacityCores]
			if len(consumed) != 2 || !ok || cores.Value() != tc.want {
				t.Errorf("consumedCapacity %v, want memory and cores %d", consumed, tc.want)
			}
		})
	}
}
