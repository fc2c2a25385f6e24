package fastpath

import (
	"fmt"
	"sync"
	"testing"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/test/builders"
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

func readName(f Found) string { return f.Read(func(n ledger.Node) string { return n.Invalid }) }

// Every NodeInfo finds its own node, first by name and then from the table,
// also after the table started over, and a node the ledger has not seen yet
// is not remembered as unknown.
func TestNodeRefsFindEachNode(t *testing.T) {
	// More NodeInfos than three quarters of the slots: the table starts over.
	l, nis := namedNodes(nodeRefSlots/4*3 + 500)
	var c Refs
	for round := range 2 {
		for _, ni := range nis {
			if got := readName(c.Get(l, ni, ni.Node().Name)); got != ni.Node().Name {
				t.Fatalf("round %d: NodeInfo of %s reads node %q", round, ni.Node().Name, got)
			}
		}
	}
	if taken := c.taken.Load(); taken == 0 || taken > nodeRefSlots/4*3 {
		t.Errorf("%d slots taken, want some and at most three quarters", taken)
	}
	late := framework.NewNodeInfo()
	late.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "late"}})
	if r := c.Get(l, late, "late"); r.Known() {
		t.Fatal("a node the ledger never saw is known")
	}
	l.SetNode("late", nil, "late", false)
	if got := readName(c.Get(l, late, "late")); got != "late" {
		t.Fatalf("node added later reads %q", got)
	}
}

// Lookups and inserts from many goroutines (go test -race) agree.
func TestNodeRefsConcurrent(t *testing.T) {
	l, nis := namedNodes(2000)
	var c Refs
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 3 * len(nis) {
				ni := nis[(k*7+g*131)%len(nis)]
				if got := readName(c.Get(l, ni, ni.Node().Name)); got != ni.Node().Name {
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

// What a node's pods request is read again once its NodeInfo changed, and
// served from the table's entry while it has not.
func TestNodeRefsRequestedFollowsGeneration(t *testing.T) {
	l, nis := namedNodes(1)
	ni := nis[0]
	var c Refs
	pod := func(name string, mem, cores int64) *v1.Pod {
		return builders.GPUPod(name).General("c", mem, cores).Obj()
	}
	want := func(step string, mem, cores int64) {
		t.Helper()
		f := c.Get(l, ni, ni.Node().Name)
		if f.entry == nil {
			t.Fatalf("%s: the table does not hold the NodeInfo", step)
		}
		got := f.Requested(ni)
		if got != [len(protocol.Resources)]int64{mem, cores, 0} {
			t.Errorf("%s: requested %v, want memory %d core %d", step, got, mem, cores)
		}
	}
	want("empty node", 0, 0)
	ni.AddPod(pod("a", 8, 25))
	want("one pod added", 8, 25)
	want("unchanged", 8, 25)
	ni.AddPod(pod("b", 4, 10))
	want("second pod added", 12, 35)
	if err := ni.RemovePod(klog.Background(), pod("a", 8, 25)); err != nil {
		t.Fatal(err)
	}
	want("first pod removed", 4, 10)

	// The entry holds the sums of the generation before; they must not be used.
	f := c.Get(l, ni, ni.Node().Name)
	ni.AddPod(pod("c", 2, 5))
	if got := f.Requested(ni); got != [len(protocol.Resources)]int64{6, 15, 0} {
		t.Errorf("requested %v after a pod was added, want [6 15 0]", got)
	}
	// Without a table entry it reads the NodeInfo every time.
	if got := (Found{}).Requested(ni); got != [len(protocol.Resources)]int64{6, 15, 0} {
		t.Errorf("uncached requested %v, want [6 15 0]", got)
	}
}

// An entry fills one cache line.
func TestNodeRefLayout(t *testing.T) {
	if size := unsafe.Sizeof(nodeRef{}); size != 64 {
		t.Errorf("nodeRef is %d bytes, want 64", size)
	}
}
