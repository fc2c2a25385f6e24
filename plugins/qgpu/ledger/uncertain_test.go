package ledger

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestUncertainLifecycle runs the event orders around a binding with an
// unknown outcome (uncertain.go): the binding was conditioned on version 10
// of pod a. Each case ends with where a holds its 10 GiB (or nowhere), in
// which state, and what each node's card 0 accounts.
func TestUncertainLifecycle(t *testing.T) {
	type step struct {
		op      string // reserve, uncertain, unreserve, observe, unbound, release
		node    string
		version uint64 // of unbound
	}
	tests := []struct {
		name          string
		steps         []step
		wantNode      string // "" for no holding
		wantBound     bool
		wantUncertain bool
	}{
		{"Unreserve keeps it", []step{{"reserve", "n1", 0}, {"uncertain", "n1", 0}, {"unreserve", "n1", 0}}, "n1", false, true},
		{"seen bound", []step{{"reserve", "n1", 0}, {"uncertain", "n1", 0}, {"unreserve", "n1", 0}, {"observe", "n1", 0}}, "n1", true, false},
		{"seen bound elsewhere", []step{{"reserve", "n1", 0}, {"uncertain", "n1", 0}, {"observe", "n2", 0}}, "n2", true, false},
		{"seen unbound at its own version", []step{{"reserve", "n1", 0}, {"uncertain", "n1", 0}, {"unbound", "", 10}}, "n1", false, true},
		{"seen unbound at an older version", []step{{"reserve", "n1", 0}, {"uncertain", "n1", 0}, {"unbound", "", 9}}, "n1", false, true},
		{"seen unbound at a newer version", []step{{"reserve", "n1", 0}, {"uncertain", "n1", 0}, {"unreserve", "n1", 0}, {"unbound", "", 11}}, "", false, false},
		{"deleted", []step{{"reserve", "n1", 0}, {"uncertain", "n1", 0}, {"release", "", 0}}, "", false, false},
		// The scheduler retries the pod: a second Reserve is refused, and the
		// framework's Unreserve of that cycle keeps the uncertain holding.
		{"retried", []step{{"reserve", "n1", 0}, {"uncertain", "n1", 0}, {"reserve", "n2", 0}, {"unreserve", "n2", 0}, {"reserve", "n1", 0}, {"unreserve", "n1", 0}}, "n1", false, true},
		// The informer was first: a bound holding stays bound.
		{"bound before the mark", []step{{"reserve", "n1", 0}, {"observe", "n1", 0}, {"uncertain", "n1", 0}, {"unbound", "", 11}}, "n1", true, false},
		{"mark of another node", []step{{"reserve", "n1", 0}, {"uncertain", "n2", 0}, {"unreserve", "n1", 0}}, "", false, false},
		{"mark without a holding", []step{{"uncertain", "n1", 0}}, "", false, false},
		// An assumed holding is not the informer's to free: its pod is
		// unbound until the binding.
		{"assumed pod seen unbound", []step{{"reserve", "n1", 0}, {"unbound", "", 11}}, "n1", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(0)
			for _, n := range []string{"n1", "n2"} {
				l.SetNode(n, inventory(cards(1, 32)...), "", false)
			}
			held := []protocol.Slice{slice(0, 10, 50)}
			for _, s := range tt.steps {
				switch s.op {
				case "reserve":
					_, _ = l.Reserve("a", s.node, general, fixed(held...))
				case "uncertain":
					l.MarkUncertain("a", s.node, 10)
				case "unreserve":
					l.Unreserve("a", s.node)
				case "observe":
					l.Observe("a", Holding{Node: s.node, Class: general, Slices: held})
				case "unbound":
					l.Unbound("a", s.version)
				case "release":
					l.Release("a", s.node)
				default:
					t.Fatalf("unknown op %q", s.op)
				}
			}
			h, ok := l.Holding("a")
			got := map[bool]string{true: h.Node}[ok]
			if got != tt.wantNode || h.Bound != tt.wantBound || h.Uncertain != tt.wantUncertain {
				t.Fatalf("holding on %q bound=%v uncertain=%v, want on %q bound=%v uncertain=%v",
					got, h.Bound, h.Uncertain, tt.wantNode, tt.wantBound, tt.wantUncertain)
			}
			for _, n := range []string{"n1", "n2"} {
				want := int64(0)
				if n == tt.wantNode {
					want = 10
				}
				if got := copyNode(t, l, n).Cards[0].UsedMemoryGiB; got != want {
					t.Errorf("%s card 0 uses %d GiB, want %d", n, got, want)
				}
			}
		})
	}
}

// The watcher (the quota) keeps counting an uncertain holding, and stops
// when it is freed.
func TestUncertainKeepsTheWatcherCounting(t *testing.T) {
	l := New(0)
	w := &countingWatcher{held: map[string]int{}}
	l.SetWatcher(w)
	l.SetNode("n1", inventory(cards(1, 32)...), "", false)
	if _, err := l.Reserve("a", "n1", general, fixed(slice(0, 10, 50))); err != nil {
		t.Fatal(err)
	}
	if !l.MarkUncertain("a", "n1", 10) {
		t.Fatal("MarkUncertain of an assumed holding = false")
	}
	l.Unreserve("a", "n1")
	if w.held["a"] != 1 {
		t.Fatalf("watcher counts pod a %d times after Unreserve, want 1", w.held["a"])
	}
	if !l.Unbound("a", 11) || w.held["a"] != 0 {
		t.Fatalf("watcher counts pod a %d times after it was freed, want 0", w.held["a"])
	}
}

// countingWatcher counts, per pod, whether the ledger says it holds slices.
type countingWatcher struct{ held map[string]int }

func (w *countingWatcher) Held(uid types.UID, _ Holding, _ []string) { w.held[string(uid)] = 1 }
func (w *countingWatcher) Released(uid types.UID)                    { w.held[string(uid)] = 0 }

// A bound pod recorded beyond a card's rules is reported with the rules it
// takes part in breaking; one within them, or one confirmed with the slices
// Reserve checked, is not.
func TestObserveReportsOverbooking(t *testing.T) {
	tests := []struct {
		name     string
		assumed  *Holding // held by pod b first
		observed Holding  // pod a, seen bound
		want     []Rule
	}{
		{"fits", nil, Holding{Node: "n1", Class: general, Slices: []protocol.Slice{slice(0, 10, 50)}}, nil},
		{"memory", &Holding{Class: general, Slices: []protocol.Slice{slice(0, 20, 30)}},
			Holding{Node: "n1", Class: general, Slices: []protocol.Slice{slice(0, 20, 50)}}, []Rule{RuleMemory}},
		{"cores", &Holding{Class: general, Slices: []protocol.Slice{slice(0, 4, 60)}},
			Holding{Node: "n1", Class: general, Slices: []protocol.Slice{slice(0, 4, 50)}}, []Rule{RuleCores}},
		{"greedy", &Holding{Class: offline, Slices: []protocol.Slice{slice(0, 4, 60)}},
			Holding{Node: "n1", Class: offline, Slices: []protocol.Slice{slice(0, 4, 50)}}, []Rule{RuleGreedy}},
		{"class", &Holding{Class: general, Slices: []protocol.Slice{slice(0, 4, 10)}},
			Holding{Node: "n1", Class: online, Slices: []protocol.Slice{slice(0, 4, 0)}}, []Rule{RuleClass}},
		{"memory and class", &Holding{Class: online, Slices: []protocol.Slice{slice(0, 16, 0)}},
			Holding{Node: "n1", Class: general, Slices: []protocol.Slice{slice(0, 20, 10)}}, []Rule{RuleMemory, RuleClass}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(0)
			l.SetNode("n1", inventory(cards(1, 32)...), "", true)
			if tt.assumed != nil {
				if _, err := l.Reserve("b", "n1", tt.assumed.Class, fixed(tt.assumed.Slices...)); err != nil {
					t.Fatal(err)
				}
			}
			changed, over := l.ObserveChecked("a", tt.observed)
			if !changed {
				t.Fatal("the bound pod was not recorded")
			}
			var got []Rule
			for _, o := range over {
				if o.Card.Index != 0 {
					t.Errorf("overbooked card %d, want 0", o.Card.Index)
				}
				got = append(got, o.Rules...)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
		})
	}
}

// The pods rule: a card of 8 GiB holds 2 pods by default.
func TestObserveReportsTooManyPods(t *testing.T) {
	l := New(0)
	l.SetNode("n1", inventory(cards(1, 8)...), "", false)
	for _, uid := range []types.UID{"b", "c"} {
		if _, err := l.Reserve(uid, "n1", general, fixed(slice(0, 1, 10))); err != nil {
			t.Fatal(err)
		}
	}
	_, over := l.ObserveChecked("a", Holding{Node: "n1", Class: general, Slices: []protocol.Slice{slice(0, 1, 10)}})
	if len(over) != 1 || !cmp.Equal(over[0].Rules, []Rule{RulePods}) {
		t.Fatalf("overbooking %+v, want the pods rule of card 0", over)
	}
	if s := over[0].String(); s != "card 0 (GPU-0): pods 3 of 2" {
		t.Errorf("String() = %q", s)
	}
}

// Confirming an assumed holding with the slices Reserve checked reports
// nothing, even on a card another bound pod overbooked since.
func TestObserveConfirmReportsOnlyNewSlices(t *testing.T) {
	l := New(0)
	l.SetNode("n1", inventory(cards(1, 32)...), "", false)
	mine := slice(0, 20, 40)
	if _, err := l.Reserve("a", "n1", general, fixed(mine)); err != nil {
		t.Fatal(err)
	}
	if _, over := l.ObserveChecked("x", Holding{Node: "n1", Class: general, Slices: []protocol.Slice{slice(0, 20, 40)}}); len(over) == 0 {
		t.Fatal("pod x beyond card 0's memory was not reported")
	}
	if _, over := l.ObserveChecked("a", Holding{Node: "n1", Class: general, Slices: []protocol.Slice{mine}}); len(over) != 0 {
		t.Fatalf("confirming a's checked slices reported %+v", over)
	}
}
