package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

// replayProfile scores with QGPU alone, so the real scheduler's choice is
// the replay's (kube-scheduler breaks ties at random: the test accepts any
// node the replay ranks first).
const replayProfile = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: qgpu-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: QGPU
    score:
      disabled:
      - name: "*"
      enabled:
      - name: QGPU
    bind:
      enabled:
      - name: QGPU
  pluginConfig:
  - name: QGPU
    args:
      nodePolicy: binpack
      cardPolicy: binpack
`

// TestReplayMatchesScheduler places a few hundred pods one by one through the
// real scheduler binary and through the trace replay's scheduling cycle
// (sim.BestNodes, the same placement code), and checks that every pod lands
// on a node the replay ranks first and on the very cards the replay picks there.
func TestReplayMatchesScheduler(t *testing.T) {
	cp := harness.Start(t)
	profile := filepath.Join(t.TempDir(), "profile.yaml")
	if err := os.WriteFile(profile, []byte(replayProfile), 0o600); err != nil {
		t.Fatal(err)
	}
	const nodes, pods = 12, 240
	var cards [][]ledger.Card
	var mixed []bool
	var names []string
	for i := range nodes {
		inv := builders.Cards(4+4*(i%2), "Tesla V100-SXM2-32GB", 32510)
		n := builders.GPUNode(fmt.Sprintf("r%02d", i), false, inv)
		createNodes(t, cp.Client, n)
		cards, mixed, names = append(cards, ledgerCards(inv)), append(mixed, false), append(names, n.Name)
	}
	harness.StartQGPUScheduler(t, cp, profile)
	after := make([][]ledger.Card, nodes)
	sizes := []struct{ mem, cores int64 }{{4, 10}, {8, 25}, {2, 5}, {16, 50}, {6, 30}, {3, 15}}
	placed := 0
	for i := range pods {
		s := sizes[(i*7)%len(sizes)]
		pod := builders.GPUPod(fmt.Sprintf("replay-%03d", i)).General("c", s.mem, s.cores).Obj()
		req, err := request.Parse(pod)
		if err != nil {
			t.Fatal(err)
		}
		best := sim.BestNodes(cards, mixed, req, "binpack", after)
		if len(best) == 0 {
			break // the cluster is full for this pod; the scheduler would leave it pending
		}
		createPods(t, cp.Client, pod)
		got, a := waitBound(t, cp.Client, pod.Namespace, pod.Name)
		n := slices.Index(names, got.Spec.NodeName)
		if !slices.Contains(best, n) {
			t.Fatalf("pod %d: scheduler chose %s, replay's best are %v", i, got.Spec.NodeName, nodeNames(names, best))
		}
		if want := heldCards(after[n], cards[n]); !slices.Equal(want, assignedCards(a)) {
			t.Fatalf("pod %d on %s: scheduler took cards %v, replay %v", i, got.Spec.NodeName, assignedCards(a), want)
		}
		cards[n] = append(cards[n][:0], after[n]...)
		placed++
	}
	if placed < pods/2 {
		t.Fatalf("only %d pods compared", placed)
	}
	t.Logf("%d pods: scheduler and replay agree on every node and card", placed)
}

func ledgerCards(inv []protocol.Card) []ledger.Card {
	out := make([]ledger.Card, len(inv))
	for i, c := range inv {
		out[i] = ledger.Card{Index: c.Index, UUID: c.UUID, Model: c.Model, MemoryGiB: c.MemoryGiB(),
			Healthy: c.Healthy, MaxPods: ledger.DefaultMaxPodsMiB(c.MemoryMiB)}
	}
	return out
}

// heldCards are the card indexes whose holdings changed.
func heldCards(after, before []ledger.Card) []int {
	var out []int
	for i := range after {
		if after[i] != before[i] {
			out = append(out, after[i].Index)
		}
	}
	return out
}

func assignedCards(a *protocol.Assignment) []int {
	var out []int
	for _, c := range a.Containers {
		for _, s := range c.Slices {
			out = append(out, s.Index)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func nodeNames(names []string, idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, names[i])
	}
	return out
}
