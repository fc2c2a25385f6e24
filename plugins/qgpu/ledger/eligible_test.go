package ledger

import (
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
)

func TestEligibleFollowsNodeChanges(t *testing.T) {
	l := New(0)
	check := func(step string, all, mixed []string) {
		t.Helper()
		if got := sets.List(l.Eligible(false)); !cmp.Equal(all, got, cmpEmpty) {
			t.Errorf("%s: eligible %v, want %v", step, got, all)
		}
		if got := sets.List(l.Eligible(true)); !cmp.Equal(mixed, got, cmpEmpty) {
			t.Errorf("%s: mixed %v, want %v", step, got, mixed)
		}
	}
	check("empty", nil, nil)
	l.SetNode("a", inventory(cards(2, 16)...), "", false)
	l.SetNode("b", inventory(cards(2, 16)...), "", true)
	l.SetNode("cpu", nil, ReasonNotQGPUNode, false)
	check("three nodes", []string{"a", "b"}, []string{"b"})
	l.SetNode("a", inventory(cards(2, 16)...), "", true)
	check("a labelled mixed", []string{"a", "b"}, []string{"a", "b"})
	// Filter, not PreFilter, names a broken inventory.
	l.SetNode("b", nil, "bad inventory", true)
	check("b's inventory broken", []string{"a", "b"}, []string{"a", "b"})
	l.RemoveNode("a")
	check("a deleted", []string{"b"}, []string{"b"})
	l.SetNode("b", nil, ReasonNotQGPUNode, false)
	check("b unlabelled", nil, nil)
	l.SetNode("cpu", inventory(cards(1, 16)...), "", false)
	check("cpu labelled", []string{"cpu"}, nil)
}

var cmpEmpty = cmp.Comparer(func(a, b []string) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return cmp.Equal(a, b)
})

// A change racing a rebuild is never lost: the next call after the last
// change sees it (run with -race).
func TestEligibleConcurrentChanges(t *testing.T) {
	l := New(0)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				name := fmt.Sprintf("n%d-%d", w, i%10)
				l.SetNode(name, inventory(cards(1, 16)...), "", i%2 == 0)
				_ = l.Eligible(i%3 == 0)
			}
		}()
	}
	wg.Wait()
	// Each worker's last write to n<w>-<k> was for i = 190+k: mixed when k is even.
	all, mixed := l.Eligible(false), l.Eligible(true)
	for w := range 4 {
		for k := range 10 {
			name := fmt.Sprintf("n%d-%d", w, k)
			if !all.Has(name) || mixed.Has(name) != (k%2 == 0) {
				t.Fatalf("%s: eligible %v mixed %v, want mixed %v", name, all.Has(name), mixed.Has(name), k%2 == 0)
			}
		}
	}
}
