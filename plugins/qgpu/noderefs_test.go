package qgpu

import (
	"fmt"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

// namedNodes is a ledger whose n nodes each read as their own name (their
// Invalid reason), and a NodeInfo per node.
func namedNodes(n int) (*ledger.Ledger, []*framework.NodeInfo) {
	l := ledger.New(0)
	nis := make([]*framework.NodeInfo, n)
	for i := range nis {
		name := fmt.Sprintf("node-%05d", i)
		l.SetNode(name, nil, name, false)
		nis[i] = framework.NewNodeInfo()
		nis[i].SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	return l, nis
}

func readName(r ledger.Ref) string { return r.Read(func(n ledger.Node) string { return n.Invalid }) }

// Every NodeInfo finds its own node, first by name and then from the table,
// also after the table started over, and a node the ledger has not seen yet
// is not remembered as unknown.
func TestNodeRefsFindEachNode(t *testing.T) {
	// More NodeInfos than three quarters of the slots: the table starts over.
	l, nis := namedNodes(nodeRefSlots/4*3 + 500)
	var c nodeRefs
	for round := range 2 {
		for _, ni := range nis {
			if got := readName(c.get(l, ni, ni.Node().Name)); got != ni.Node().Name {
				t.Fatalf("round %d: NodeInfo of %s reads node %q", round, ni.Node().Name, got)
			}
		}
	}
	if taken := c.taken.Load(); taken == 0 || taken > nodeRefSlots/4*3 {
		t.Errorf("%d slots taken, want some and at most three quarters", taken)
	}
	late := framework.NewNodeInfo()
	late.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "late"}})
	if r := c.get(l, late, "late"); r.Known() {
		t.Fatal("a node the ledger never saw is known")
	}
	l.SetNode("late", nil, "late", false)
	if got := readName(c.get(l, late, "late")); got != "late" {
		t.Fatalf("node added later reads %q", got)
	}
}

// Lookups and inserts from many goroutines (go test -race) agree.
func TestNodeRefsConcurrent(t *testing.T) {
	l, nis := namedNodes(2000)
	var c nodeRefs
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 3 * len(nis) {
				ni := nis[(k*7+g*131)%len(nis)]
				if got := readName(c.get(l, ni, ni.Node().Name)); got != ni.Node().Name {
					errs <- fmt.Errorf("NodeInfo of %s reads node %q", ni.Node().Name, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
