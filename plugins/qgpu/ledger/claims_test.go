package ledger

import (
	"fmt"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// claimSlice is a claim's slice as an allocation names it: by index only.
func claimSlice(index int, mem, cores int64) protocol.Slice {
	return protocol.Slice{Index: index, MemoryGiB: mem, Cores: cores}
}

// used is card i's memory, cores and holders on node n.
func used(t *testing.T, l *Ledger, node string, i int) [3]int64 {
	t.Helper()
	c := copyNode(t, l, node).Cards[i]
	return [3]int64{c.UsedMemoryGiB, c.UsedCores, int64(c.Pods())}
}

// recordingWatcher keeps what the ledger told it, by UID.
type recordingWatcher struct {
	mu   sync.Mutex
	held map[types.UID]Holding
}

func (w *recordingWatcher) Held(uid types.UID, h Holding, _ []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held[uid] = h
}

func (w *recordingWatcher) Released(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.held, uid)
}

func (w *recordingWatcher) has(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.held[uid]
	return ok
}

// TestClaimOutlivesItsPod: a claim's slice is counted once while the pod
// placed with it holds it, and by the claim from the pod's release until
// the allocation is cleared, whoever consumes it then.
func TestClaimOutlivesItsPod(t *testing.T) {
	const podA, podB, claim = types.UID("a"), types.UID("b"), types.UID("claim")
	general := Holding{Node: "n", Class: protocol.ClassGeneral, Namespace: "team", Slices: []protocol.Slice{claimSlice(0, 10, 50)}}
	steps := []struct {
		name  string
		do    func(l *Ledger) bool
		want  [3]int64 // card 0: memory, cores, holders
		wantW bool     // the watcher tallies the claim itself
	}{
		{"pod A placed with the claim's slice", func(l *Ledger) bool {
			_, err := l.ReserveFor(podA, "team", "n", protocol.ClassGeneral, fixed(slice(0, 10, 50)))
			return err == nil
		}, [3]int64{10, 50, 1}, false},
		{"the claim allocated for A: covered by A", func(l *Ledger) bool {
			return l.SetClaim(claim, general, []types.UID{podA})
		}, [3]int64{10, 50, 1}, false},
		{"A bound", func(l *Ledger) bool {
			return l.Observe(podA, Holding{Node: "n", Class: protocol.ClassGeneral, Namespace: "team", Slices: []protocol.Slice{slice(0, 10, 50)}})
		}, [3]int64{10, 50, 1}, false},
		{"B joins the claim by spec.nodeName (holds nothing itself)", func(l *Ledger) bool {
			return l.SetClaim(claim, general, []types.UID{podA, podB})
		}, [3]int64{10, 50, 1}, false},
		{"A deleted: the claim counts its slice", func(l *Ledger) bool {
			return l.Release(podA, "")
		}, [3]int64{10, 50, 1}, true},
		{"the controller drops A from reservedFor", func(l *Ledger) bool {
			return l.SetClaim(claim, general, []types.UID{podB})
		}, [3]int64{10, 50, 1}, true},
		{"the same status again changes nothing", func(l *Ledger) bool {
			return !l.SetClaim(claim, general, []types.UID{podB})
		}, [3]int64{10, 50, 1}, true},
		{"the allocation cleared", func(l *Ledger) bool {
			return l.ReleaseClaim(claim)
		}, [3]int64{0, 0, 0}, false},
		{"released twice", func(l *Ledger) bool {
			return !l.ReleaseClaim(claim)
		}, [3]int64{0, 0, 0}, false},
	}
	l := New(0)
	w := &recordingWatcher{held: map[types.UID]Holding{}}
	l.SetWatcher(w)
	l.SetNode("n", inventory(cards(1, 15)...), "", false)
	for _, st := range steps {
		if !st.do(l) {
			t.Fatalf("%s: the call reported no change", st.name)
		}
		if got := used(t, l, "n", 0); got != st.want {
			t.Fatalf("%s: card 0 holds (memory, cores, holders) %v, want %v", st.name, got, st.want)
		}
		if got := w.has(claim); got != st.wantW {
			t.Fatalf("%s: watcher tallies the claim: %v, want %v", st.name, got, st.wantW)
		}
	}
}

// TestClaimSeenBeforeItsPod: after a restart the claim may arrive before
// the pod's bound assignment, and before the node's inventory.
func TestClaimSeenBeforeItsPod(t *testing.T) {
	const pod, claim = types.UID("p"), types.UID("c")
	l := New(0)
	l.SetClaim(claim, Holding{Node: "n", Class: protocol.ClassGeneral, Namespace: "team", Slices: []protocol.Slice{claimSlice(1, 4, 30)}}, []types.UID{pod})
	l.SetNode("n", inventory(cards(2, 15)...), "", false)
	if got := used(t, l, "n", 1); got != [3]int64{4, 30, 1} {
		t.Fatalf("claim before the inventory: card 1 holds %v, want [4 30 1]", got)
	}
	l.Observe(pod, Holding{Node: "n", Class: protocol.ClassGeneral, Namespace: "team", Slices: []protocol.Slice{slice(1, 4, 30)}})
	if got := used(t, l, "n", 1); got != [3]int64{4, 30, 1} {
		t.Fatalf("pod observed after its claim: card 1 holds %v, want it counted once [4 30 1]", got)
	}
	// A slice moved to another node follows it.
	l.Release(pod, "")
	l.SetNode("m", inventory(cards(2, 15)...), "", false)
	l.SetClaim(claim, Holding{Node: "m", Class: protocol.ClassGeneral, Namespace: "team", Slices: []protocol.Slice{claimSlice(0, 4, 30)}}, nil)
	if got := used(t, l, "n", 1); got != [3]int64{} {
		t.Errorf("claim moved away: card 1 of n still holds %v", got)
	}
	if got := used(t, l, "m", 0); got != [3]int64{4, 30, 1} {
		t.Errorf("claim moved: card 0 of m holds %v, want [4 30 1]", got)
	}
}

// TestClaimsRace: pods and claims change concurrently; the cards end with
// exactly what the live entries hold (run with -race).
func TestClaimsRace(t *testing.T) {
	l := New(0)
	l.SetNode("n", inventory(cards(4, 32)...), "", false)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 50 {
				pod, claim := types.UID(fmt.Sprintf("p%d-%d", i, round)), types.UID(fmt.Sprintf("c%d-%d", i, round))
				h := Holding{Node: "n", Class: protocol.ClassGeneral, Slices: []protocol.Slice{slice(i, 2, 10)}}
				if _, err := l.Reserve(pod, "n", protocol.ClassGeneral, fixed(h.Slices...)); err != nil {
					t.Errorf("reserve %s: %v", pod, err)
					return
				}
				ch := h
				ch.Slices = []protocol.Slice{claimSlice(i, 2, 10)}
				l.SetClaim(claim, ch, []types.UID{pod})
				l.Release(pod, "")
				if round%10 != 0 {
					l.ReleaseClaim(claim)
				}
			}
		}()
	}
	wg.Wait()
	for i := range 4 {
		if got := used(t, l, "n", i); got != [3]int64{5 * 2, 5 * 10, 5} {
			t.Errorf("card %d holds %v, want the 5 claims left: [10 50 5]", i, got)
		}
	}
}
