package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// FitReason must give PlaceIn's answer for every one-container pod, under
// every policy, and leave the cards as they were: Filter runs it on the
// ledger's own cards. The fuzzer builds a node from the bytes (cards of two
// models, some unhealthy, holding pods of each class) and a pod.
func FuzzFitReasonAgreesWithPlace(f *testing.F) {
	f.Add([]byte{3, 0, 2, 1, 8, 30}, uint8(0), uint8(4), uint8(20), false)
	f.Add([]byte{4, 1, 1, 1, 4, 0}, uint8(1), uint8(8), uint8(0), false)
	f.Add([]byte{2, 2, 3, 0, 6, 50}, uint8(2), uint8(6), uint8(40), true)
	f.Add([]byte{8, 0, 0, 0, 0, 0}, uint8(0), uint8(64), uint8(200), false)
	f.Fuzz(func(t *testing.T, node []byte, classByte, mem, cores uint8, mixed bool) {
		cs := fuzzCards(node)
		r := fuzzRequest(classByte, mem, cores)
		before := append([]ledger.Card(nil), cs...)
		got := FitReason(cs, mixed, r)
		if diff := cmp.Diff(before, cs); diff != "" {
			t.Fatalf("FitReason changed the cards (-before +after):\n%s", diff)
		}
		for _, policy := range []Policy{Binpack, Spread} {
			_, want := PlaceIn(append([]ledger.Card(nil), cs...), mixed, r, policy, nil, nil)
			if got != want {
				t.Fatalf("%+v on %d cards (mixed %v): FitReason %q, PlaceIn(%s) %q", r.Containers[0], len(cs), mixed, got, policy, want)
			}
		}
	})
}

// fuzzCards reads up to 8 cards of 6 bytes: model, health, then one pod of
// a class with memory and cores.
func fuzzCards(b []byte) []ledger.Card {
	var out []ledger.Card
	for i := 0; i+6 <= len(b) && len(out) < 8; i += 6 {
		c := ledger.Card{Index: len(out), UUID: "GPU", Model: "Tesla T4", MemoryGiB: 15, Healthy: b[i+1]%4 != 0, MaxPods: 3}
		if b[i]%2 == 1 {
			c.Model, c.MemoryGiB, c.MaxPods = "A100", 80, 20
		}
		if n := int64(b[i+4]) % (c.MemoryGiB + 1); n > 0 {
			class := []protocol.Class{general, online, offline}[b[i+3]%3]
			cores := int64(b[i+5]) % 101
			if class == online {
				cores = 0
			}
			if c.Fits(class, n, cores, true) {
				c.Take(class, n, cores, true)
			}
		}
		out = append(out, c)
	}
	return out
}

func fuzzRequest(classByte, mem, cores uint8) *request.Request {
	class := []protocol.Class{general, online, offline}[classByte%3]
	m := max(int64(mem)%96, 1)
	c := int64(cores) % 401
	switch {
	case class == online:
		return req(online, shared("c", m, 0))
	case class == offline:
		return req(offline, shared("c", m, max(c%101, 1)))
	case c >= 100:
		k := int(c / 100)
		return req(general, whole("c", int64(k)*max(m/int64(k), 1), k))
	}
	return use(req(general, shared("c", m, max(c, 1))), nil, nouseFor(classByte))
}

// nouseFor sometimes excludes a model, so that the model filter is exercised.
func nouseFor(b uint8) []string {
	if b%5 == 4 {
		return []string{"T4"}
	}
	return nil
}
