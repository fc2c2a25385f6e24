package qgpu

import (
	"context"
	"fmt"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// Concurrent Filter, Reserve and Unreserve on shared nodes (as the scheduler's
// parallel Filter and its binding goroutines do) never oversubscribe a card.
// Run with -race.
func TestConcurrentFilterReserveUnreserve(t *testing.T) {
	p := newPlugin(t, nil)
	nodes := []*v1.Node{v100Node("n0", 2, true), v100Node("n1", 2, true), v100Node("n2", 2, false)}
	p.setNodes(nodes...)
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				pod := racePod(w, i)
				cs := framework.NewCycleState()
				if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
					t.Error(st)
					return
				}
				for _, n := range nodes {
					if !p.Filter(ctx, cs, pod, nodeInfo(n)).IsSuccess() {
						continue
					}
					if p.Reserve(ctx, cs, pod, n.Name).IsSuccess() && i%3 != 0 {
						p.Unreserve(ctx, cs, pod, n.Name)
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	for _, n := range nodes {
		node, _ := p.ledger.CopyNode(n.Name, nil)
		for _, c := range node.Cards {
			checkCard(t, n.Name, c)
		}
	}
}

func racePod(w, i int) *v1.Pod {
	b := builders.GPUPod(fmt.Sprintf("w%d-%d", w, i))
	switch i % 3 {
	case 0:
		return b.General("c", int64(1+i%5), int64(10+i%40)).Obj()
	case 1:
		return b.Online("c", int64(1+i%3)).Obj()
	}
	return b.Offline("c", int64(1+i%4), int64(10+i%60)).Obj()
}

func checkCard(t *testing.T, node string, c ledger.Card) {
	t.Helper()
	bad := c.UsedMemoryGiB > c.MemoryGiB || c.UsedCores > protocol.CoresPerCard || c.UsedGreedy > protocol.CoresPerCard ||
		c.Pods() > c.MaxPods || (c.General > 0 && c.Online+c.Offline > 0) || c.UsedMemoryGiB < 0
	if bad {
		t.Errorf("node %s card %d oversubscribed: %+v", node, c.Index, c)
	}
}
