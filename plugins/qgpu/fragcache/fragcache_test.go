package fragcache

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

func cards(n int) []ledger.Card {
	out := make([]ledger.Card, n)
	for i := range out {
		out[i] = ledger.Card{Index: i, UUID: fmt.Sprint("GPU-", i), Model: "V100", MemoryGiB: 31, Healthy: true, MaxPods: 7}
	}
	return out
}

func workload(mem, cores int64) *placement.Workload {
	return placement.NewWorkload([]placement.Shape{
		{MemoryGiB: mem, Cores: cores, Cards: 1, CPUMilli: 4000, Weight: 0.7},
		{MemoryGiB: 31, Cores: 100, Cards: 1, Whole: true, CPUMilli: 8000, Weight: 0.3},
	})
}

// Whatever the sequence of nodes, card states, CPU and workloads asked
// for, the cache answers what placement.Frag answers: an entry is never
// read for other inputs than its own (the package's invariants).
func TestFragIsFrag(t *testing.T) {
	var c Cache
	rng := rand.New(rand.NewSource(1))
	works := []*placement.Workload{workload(8, 25), workload(8, 25), workload(24, 80)}
	nodes := map[string][]ledger.Card{}
	for i := range 12 {
		nodes[fmt.Sprint("node-", i)] = cards(2 + i%3*3)
	}
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	var hitsAsked int
	for step := range 5000 {
		name := names[rng.Intn(len(names))]
		cs := nodes[name]
		switch rng.Intn(4) {
		case 0: // a pod lands on a card
			k := rng.Intn(len(cs))
			if cs[k].Fits(protocol.ClassGeneral, 4, 10, true) {
				cs[k].Take(protocol.ClassGeneral, 4, 10, true)
			}
		case 1: // the node empties
			nodes[name] = cards(len(cs))
			cs = nodes[name]
		default: // unchanged: the entry may answer
			hitsAsked++
		}
		cpu, known := int64(rng.Intn(3))*4000, rng.Intn(4) > 0
		w := works[rng.Intn(len(works))]
		got := c.For(name).Frag(cs, cpu, known, w)
		if want := placement.Frag(cs, cpu, known, w); got != want {
			t.Fatalf("step %d, %s: cache %v, Frag %v", step, name, got, want)
		}
	}
	if hitsAsked == 0 {
		t.Fatal("no lookup of an unchanged node")
	}
}

// Two nodes in one entry evict each other and each gets its own answer.
func TestSharedEntry(t *testing.T) {
	var c Cache
	e := c.For("a")
	full, empty := cards(4), cards(4)
	full[0].Take(protocol.ClassGeneral, 20, 60, true)
	w := workload(16, 50)
	for range 3 {
		if got, want := e.Frag(full, 0, false, w), placement.Frag(full, 0, false, w); got != want {
			t.Fatalf("full node: %v, want %v", got, want)
		}
		if got, want := e.Frag(empty, 0, false, w), placement.Frag(empty, 0, false, w); got != want {
			t.Fatalf("empty node: %v, want %v", got, want)
		}
	}
	if c.For("a") != e {
		t.Fatal("a node's entry changed")
	}
}

// A hit allocates nothing: Filter must not allocate.
func TestHitDoesNotAllocate(t *testing.T) {
	var c Cache
	cs, w := cards(8), workload(8, 25)
	e := c.For("n1")
	e.Frag(cs, 4000, true, w)
	if allocs := testing.AllocsPerRun(100, func() { c.For("n1").Frag(cs, 4000, true, w) }); allocs != 0 {
		t.Fatalf("a hit allocates %v times", allocs)
	}
}

// sameHome finds n names whose entries start at the same slot.
func sameHome(t *testing.T, n int) []string {
	t.Helper()
	byHome := map[uint32][]string{}
	for i := range 1 << 20 {
		name := fmt.Sprintf("node-%05d", i)
		home := placement.NameHash(name) % slots
		if byHome[home] = append(byHome[home], name); len(byHome[home]) == n {
			return byHome[home]
		}
	}
	t.Fatalf("no %d names share a slot", n)
	return nil
}

// TestNodesNeverShareAnEntry: two nodes whose names hash to the same slot
// keep an entry each, so neither evicts the other's measure in every cycle
// (with one entry per hash, 44 % of 5000 nodes did).
func TestNodesNeverShareAnEntry(t *testing.T) {
	var c Cache
	names := sameHome(t, 2)
	a, b := c.For(names[0]), c.For(names[1])
	if a == b {
		t.Fatalf("%s and %s share an entry", names[0], names[1])
	}
	full, w := cards(4), workload(16, 50)
	full[0].Take(protocol.ClassGeneral, 20, 60, true)
	a.Frag(cards(4), 0, false, w)
	b.Frag(full, 0, false, w)
	for _, n := range names {
		e := c.For(n)
		if !e.valid || e.name != n {
			t.Errorf("%s: entry of %q, valid %v after one measure", n, e.name, e.valid)
		}
	}
	if c.For(names[0]) != a || c.For(names[1]) != b {
		t.Error("a node's entry changed")
	}
}

// TestFullProbesEvict: a node whose every probe slot holds another node
// still gets an entry of its own, and keeps it.
func TestFullProbesEvict(t *testing.T) {
	var c Cache
	names := sameHome(t, probes+1)
	for _, n := range names[:probes] {
		c.For(n)
	}
	last := names[probes]
	e := c.For(last)
	if e.name != last || c.For(last) != e {
		t.Fatalf("%s: entry of %q, or not kept", last, e.name)
	}
	if got := c.For(names[0]); got.name != names[0] {
		t.Fatalf("evicted %s: entry of %q", names[0], got.name)
	}
}
