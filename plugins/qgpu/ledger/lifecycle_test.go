package ledger

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// step is one event in a holding's life (doc.go): what the scheduler or the
// informer does for pod "a".
type step struct {
	op   string // reserve, observe, unreserve, release
	node string
}

// TestHoldingLifecycle runs the event orders of kube-scheduler and its pod
// informer against the assumed/bound states. Each case ends with where pod a
// holds its 10 GiB (or nowhere) and what each node's card 0 accounts.
func TestHoldingLifecycle(t *testing.T) {
	tests := []struct {
		name      string
		steps     []step
		wantNode  string // "" for no holding
		wantBound bool
	}{
		{"bind succeeds", []step{{"reserve", "n1"}, {"observe", "n1"}}, "n1", true},
		{"bind fails, nothing persisted", []step{{"reserve", "n1"}, {"unreserve", "n1"}}, "", false},
		// A bind that failed after the apiserver persisted it: the informer
		// saw the pod bound before the framework called Unreserve.
		{"bind persisted, error returned, informer first", []step{{"reserve", "n1"}, {"observe", "n1"}, {"unreserve", "n1"}}, "n1", true},
		{"bind persisted, error returned, Unreserve first", []step{{"reserve", "n1"}, {"unreserve", "n1"}, {"observe", "n1"}}, "n1", true},
		// Reserve refused ("already holds slices") and the framework calls
		// Unreserve on the node of that cycle.
		{"Unreserve after a refused Reserve", []step{{"observe", "n1"}, {"reserve", "n1"}, {"unreserve", "n1"}}, "n1", true},
		{"Unreserve of a refused Reserve elsewhere", []step{{"observe", "n1"}, {"reserve", "n2"}, {"unreserve", "n2"}}, "n1", true},
		// Retried after a bind error, assumed on n2, while the API holds the
		// first binding on n1: the API wins, and the late Unreserve of n2 is a no-op.
		{"assumed elsewhere, observed bound", []step{{"reserve", "n1"}, {"unreserve", "n1"}, {"reserve", "n2"}, {"observe", "n1"}, {"unreserve", "n2"}}, "n1", true},
		{"late Unreserve of another node", []step{{"reserve", "n2"}, {"unreserve", "n1"}}, "n2", false},
		{"bound pod deleted", []step{{"reserve", "n1"}, {"observe", "n1"}, {"release", ""}}, "", false},
		{"assumed pod deleted", []step{{"reserve", "n1"}, {"release", ""}}, "", false},
		{"release on another node keeps it", []step{{"observe", "n1"}, {"release", "n2"}}, "n1", true},
		{"second observe keeps the first", []step{{"observe", "n1"}, {"observe", "n2"}}, "n1", true},
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
				case "observe":
					l.Observe("a", Holding{Node: s.node, Class: general, Slices: held})
				case "unreserve":
					l.Unreserve("a", s.node)
				case "release":
					l.Release("a", s.node)
				default:
					t.Fatalf("unknown op %q", s.op)
				}
			}
			h, ok := l.Holding("a")
			if got := map[bool]string{true: h.Node}[ok]; got != tt.wantNode || h.Bound != tt.wantBound {
				t.Fatalf("holding on %q bound=%v, want on %q bound=%v", got, h.Bound, tt.wantNode, tt.wantBound)
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

// An assumed holding confirmed with other slices takes the observed ones:
// the assignment on the pod is what the agent hands out.
func TestObserveConfirmsWithObservedSlices(t *testing.T) {
	l := New(0)
	l.SetNode("n1", inventory(cards(2, 32)...), "", false)
	if _, err := l.Reserve("a", "n1", general, fixed(slice(0, 4, 30))); err != nil {
		t.Fatal(err)
	}
	observed := Holding{Node: "n1", Class: general, Slices: []protocol.Slice{slice(1, 6, 20)}}
	if !l.Observe("a", observed) {
		t.Fatal("Observe of an assumed holding = false")
	}
	want := []Card{ledgerCard(cards(2, 32)[0], 8), withUse(ledgerCard(cards(2, 32)[1], 8), 6, 20, 0, 1, 0, 0)}
	if diff := cmp.Diff(want, copyNode(t, l, "n1").Cards); diff != "" {
		t.Errorf("cards (-want +got):\n%s", diff)
	}
}
