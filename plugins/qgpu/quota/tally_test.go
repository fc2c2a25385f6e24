package quota

import (
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

func mustSpec(t *testing.T, ns, value string) map[string]Spec {
	t.Helper()
	s, err := ParseSpec(ns, value)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]Spec{ns: s}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name  string
		spec  string
		held  []SliceUse
		ask   Use
		other string // a namespace whose use must not count
		want  []string
	}{
		{name: "fits", spec: "T4: {cards: 1}", held: []SliceUse{{"Tesla-T4", Use{50, 4}}}, ask: Use{50, 4}},
		{name: "cards over", spec: "T4: {cards: 1}", held: []SliceUse{{"Tesla-T4", Use{60, 4}}}, ask: Use{50, 4},
			want: []string{`namespace "a" is over its qGPU quota for model "T4": cards used 0.6 + asked 0.5 > limit 1`}},
		{name: "memory over", spec: "T4: {memoryGiB: 10}", held: []SliceUse{{"Tesla-T4", Use{10, 8}}}, ask: Use{10, 4},
			want: []string{`namespace "a" is over its qGPU quota for model "T4": memoryGiB used 8 + asked 4 > limit 10`}},
		{name: "other model's use does not count", spec: "T4: {cards: 1}", held: []SliceUse{{"Tesla-V100", Use{100, 4}}}, ask: Use{100, 4}},
		{name: "any model counts all", spec: `"*": {cards: 1}`, held: []SliceUse{{"Tesla-V100", Use{100, 4}}}, ask: Use{1, 1},
			want: []string{`namespace "a" is over its qGPU quota for model "*": cards used 1 + asked 0.01 > limit 1`}},
		{name: "zero forbids", spec: "T4: {cards: 0}", ask: Use{1, 1},
			want: []string{`namespace "a" is over its qGPU quota for model "T4": cards used 0 + asked 0.01 > limit 0`}},
		{name: "other namespace", spec: "T4: {cards: 1}", other: "b", held: []SliceUse{{"Tesla-T4", Use{100, 4}}}, ask: Use{100, 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tl := NewTally()
			tl.SetConfigMap(mustSpec(t, "a", c.spec), nil)
			ns := "a"
			if c.other != "" {
				ns = c.other
			}
			tl.Held("p1", ns, c.held)
			var got []string
			for _, e := range tl.Check("a", c.ask) {
				got = append(got, e.Error())
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("exceeded (-want +got):\n%s", diff)
			}
		})
	}
}

// CheckSlices counts only the slices on cards the limit matches: a pod
// whose containers sit on a T4 and a V100 asks the T4 limit for its T4
// slice alone.
func TestCheckSlices(t *testing.T) {
	tl := NewTally()
	tl.SetConfigMap(mustSpec(t, "a", "T4: {cards: 0.5}\nV100: {cards: 0.2}"), nil)
	uses := []SliceUse{{"Tesla-T4", Use{40, 2}}, {"Tesla-V100", Use{30, 2}}}
	ex := tl.CheckSlices("a", uses)
	if len(ex) != 1 || ex[0].Limit.Model != "V100" || ex[0].Asked != 30 {
		t.Fatalf("exceeded %+v, want the V100 limit alone, asked 30", ex)
	}
}

func TestHeldReleased(t *testing.T) {
	tl := NewTally()
	tl.SetConfigMap(mustSpec(t, "a", "T4: {cards: 2, memoryGiB: 20}"), nil)
	tl.Held("p1", "a", []SliceUse{{"Tesla-T4", Use{50, 5}}})
	tl.Held("p2", "a", []SliceUse{{"Tesla-T4", Use{100, 10}}})
	// Held again replaces (an assumed holding confirmed with other slices).
	tl.Held("p1", "a", []SliceUse{{"Tesla-T4", Use{30, 3}}})
	rows, _ := tl.Rows()
	if diff := cmp.Diff([]Row{{Namespace: "a", Limit: Limit{"T4", 200, 20}, Used: Use{130, 13}}}, rows); diff != "" {
		t.Fatalf("rows (-want +got):\n%s", diff)
	}
	tl.Released("p1")
	tl.Released("p1")
	tl.Released("p2")
	rows, _ = tl.Rows()
	if rows[0].Used != (Use{}) {
		t.Fatalf("used %+v after every pod released, want nothing", rows[0].Used)
	}
	if len(tl.used) != 0 || len(tl.holders) != 0 {
		t.Fatalf("tally keeps %d namespaces and %d holders after every release", len(tl.used), len(tl.holders))
	}
}

// A broken entry keeps the namespace's last valid limits; an entry that is
// gone takes them away.
func TestSetConfigMapKeepsLastValid(t *testing.T) {
	tl := NewTally()
	if !tl.SetConfigMap(mustSpec(t, "a", "T4: {cards: 1}"), nil) {
		t.Fatal("first limits: want changed")
	}
	if tl.SetConfigMap(map[string]Spec{}, map[string]error{"a": fmt.Errorf("data[a].T4.cards: value -1")}) {
		t.Fatal("broken entry: want unchanged")
	}
	rows, invalid := tl.Rows()
	if len(rows) != 1 || rows[0].Limit.Cores != 100 || invalid["a"] == nil {
		t.Fatalf("rows %+v invalid %v: want the last valid limit and the error", rows, invalid)
	}
	// A valid entry wins over an error for the same key (binaryData).
	if !tl.SetConfigMap(mustSpec(t, "a", "T4: {cards: 2}"), map[string]error{"a": fmt.Errorf("binaryData[a]")}) {
		t.Fatal("new valid entry beside an error: want changed")
	}
	if rows, _ := tl.Rows(); rows[0].Limit.Cores != 200 {
		t.Fatalf("limit %+v, want the new valid one", rows[0].Limit)
	}
	if !tl.SetConfigMap(map[string]Spec{}, nil) || tl.Limited("a") {
		t.Fatal("entry removed: want changed and unlimited")
	}
}

// A namespace whose first entry is broken (or whose earlier valid one was
// lost with a restart) is closed until the entry is fixed, with a reason
// that names the entry's error.
func TestBrokenFirstEntryFailsClosed(t *testing.T) {
	tl := NewTally()
	tl.SetConfigMap(nil, map[string]error{"a": fmt.Errorf("data[a].T4.cards: value -1 must be ...")})
	if !tl.Limited("a") {
		t.Fatal("a namespace with a broken entry must be limited")
	}
	want := `namespace "a" has no valid qGPU quota (its entry was refused and no earlier valid one is known): data[a].T4.cards: value -1 must be ...`
	for name, ex := range map[string][]Exceeded{
		"Check":       tl.Check("a", Use{Cores: 1, MemoryGiB: 1}),
		"CheckSlices": tl.CheckSlices("a", []SliceUse{{Model: "Tesla-T4", Use: Use{Cores: 1}}}),
	} {
		if len(ex) != 1 || ex[0].Error() != want || ex[0].Limit.Model != AnyModel {
			t.Errorf("%s: %+v, want one refusal on every model: %s", name, ex, want)
		}
	}
	if tl.Limited("b") || len(tl.Check("b", Use{Cores: 100})) != 0 {
		t.Error("another namespace must stay unlimited")
	}
	tl.SetConfigMap(mustSpec(t, "a", "T4: {cards: 1}"), nil)
	if ex := tl.Check("a", Use{Cores: 1, MemoryGiB: 1}); len(ex) != 0 {
		t.Errorf("after the entry was fixed: %+v", ex)
	}
}

func TestAskAndHoldingUseAgree(t *testing.T) {
	cases := []struct {
		name   string
		req    request.Request
		class  protocol.Class
		slices []protocol.Slice
	}{
		{"general shared", request.Request{Class: protocol.ClassGeneral, Containers: []request.Container{{MemoryGiB: 4, Cores: 30, Cards: 1}}},
			protocol.ClassGeneral, []protocol.Slice{{Index: 0, MemoryGiB: 4, Cores: 30}}},
		{"general two whole cards", request.Request{Class: protocol.ClassGeneral, Containers: []request.Container{{MemoryGiB: 20, Cores: 200, Cards: 2, Whole: true}}},
			protocol.ClassGeneral, []protocol.Slice{{Index: 0, MemoryGiB: 10, Cores: 100}, {Index: 1, MemoryGiB: 10, Cores: 100}}},
		{"online two containers one card", request.Request{Class: protocol.ClassOnline, Containers: []request.Container{{MemoryGiB: 2, Cards: 1}, {MemoryGiB: 3, Cards: 1}}},
			protocol.ClassOnline, []protocol.Slice{{Index: 1, MemoryGiB: 2}, {Index: 1, MemoryGiB: 3}}},
		{"offline", request.Request{Class: protocol.ClassOffline, Containers: []request.Container{{MemoryGiB: 8, Cores: 40, Cards: 1}}},
			protocol.ClassOffline, []protocol.Slice{{Index: 0, MemoryGiB: 8, Cores: 40}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var held Use
			for _, u := range HoldingUse(c.class, c.slices, make([]string, len(c.slices))) {
				held = held.add(u.Use, 1)
			}
			if ask := Ask(&c.req); ask != held {
				t.Errorf("Ask %+v, held %+v: the check before placement and the tally must count alike", ask, held)
			}
		})
	}
}

// The ledger tells the tally of every holding it records and drops, with
// the card models, whatever the path (Reserve, Observe, Unreserve, Release).
func TestFeedFollowsTheLedger(t *testing.T) {
	l := ledger.New(0)
	tl := NewTally()
	tl.SetConfigMap(mustSpec(t, "a", `"*": {cards: 4}`), nil)
	l.SetWatcher(Feed{Tally: tl})
	inv := &protocol.Inventory{Cards: []protocol.Card{{Index: 0, UUID: "GPU-0", Model: "Tesla-T4", MemoryMiB: 15109, Healthy: true}}}
	l.SetNode("n1", inv, "", false)
	slice := protocol.Slice{Index: 0, UUID: "GPU-0", MemoryGiB: 4, Cores: 30}
	fixed := func(ledger.Node) ([]protocol.Slice, error) { return []protocol.Slice{slice}, nil }
	used := func() Use { rows, _ := tl.Rows(); return rows[0].Used }
	if _, err := l.ReserveFor("p1", "a", "n1", protocol.ClassGeneral, fixed); err != nil {
		t.Fatal(err)
	}
	if got := used(); got != (Use{30, 4}) {
		t.Fatalf("after Reserve: used %+v", got)
	}
	l.Observe("p1", ledger.Holding{Node: "n1", Class: protocol.ClassGeneral, Namespace: "a", Slices: []protocol.Slice{slice}})
	if got := used(); got != (Use{30, 4}) {
		t.Fatalf("after Observe confirmed it: used %+v, want it counted once", got)
	}
	l.Unreserve("p1", "n1") // bound: kept
	if got := used(); got != (Use{30, 4}) {
		t.Fatalf("after Unreserve of a bound holding: used %+v", got)
	}
	l.Release("p1", "")
	if got := used(); got != (Use{}) {
		t.Fatalf("after Release: used %+v", got)
	}
	if _, err := l.ReserveFor("p2", "a", "n1", protocol.ClassGeneral, fixed); err != nil {
		t.Fatal(err)
	}
	l.Unreserve("p2", "n1")
	if got := used(); got != (Use{}) {
		t.Fatalf("after Unreserve of an assumed holding: used %+v", got)
	}
}

// Reserve, Observe and Release from many goroutines leave the tally equal
// to the ledger's holdings (run with -race).
func TestFeedConcurrent(t *testing.T) {
	l := ledger.New(0)
	tl := NewTally()
	tl.SetConfigMap(mustSpec(t, "a", `"*": {cards: 1000}`), nil)
	l.SetWatcher(Feed{Tally: tl})
	var cards []protocol.Card
	for i := range 4 {
		cards = append(cards, protocol.Card{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: "Tesla-T4", MemoryMiB: 15109, Healthy: true})
	}
	l.SetNode("n1", &protocol.Inventory{Cards: cards}, "", false)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				uid := types.UID(fmt.Sprintf("p%d-%d", g, i))
				s := protocol.Slice{Index: i % 4, UUID: fmt.Sprintf("GPU-%d", i%4), MemoryGiB: 1, Cores: 1}
				_, _ = l.ReserveFor(uid, "a", "n1", protocol.ClassGeneral, func(ledger.Node) ([]protocol.Slice, error) { return []protocol.Slice{s}, nil })
				if i%2 == 0 {
					l.Observe(uid, ledger.Holding{Node: "n1", Class: protocol.ClassGeneral, Namespace: "a", Slices: []protocol.Slice{s}})
				}
				if i%3 == 0 {
					l.Release(uid, "")
				}
			}
		}()
	}
	wg.Wait()
	n, _ := l.CopyNode("n1", nil)
	var want Use
	for _, c := range n.Cards {
		want = want.add(Use{c.UsedCores, c.UsedMemoryGiB}, 1)
	}
	rows, _ := tl.Rows()
	if rows[0].Used != want {
		t.Fatalf("tally %+v, ledger %+v", rows[0].Used, want)
	}
}
