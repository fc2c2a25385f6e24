package sim

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

// paperCards are paper-mode cards with the given GPU-milli used.
func paperCards(used ...int64) []ledger.Card {
	n := Node{GPUs: len(used), Model: "T4"}
	cards := Paper.Cards(&n)
	for i, u := range used {
		if u > 0 {
			cards[i].Take(protocol.ClassGeneral, u, 0, true)
		}
	}
	return cards
}

func TestPackingScore(t *testing.T) {
	tests := []struct {
		name  string
		cards []ledger.Card
		pod   Pod
		want  int64
	}{
		{"empty node: a third less its free cards", paperCards(0, 0, 0, 0), Pod{NumGPU: 1, GPUMilli: 500}, 100/3 - 4},
		{"share a used card: 100 less its room/10 in percent", paperCards(600, 0), Pod{NumGPU: 1, GPUMilli: 300}, 100 - 40/10},
		{"free card on a used node", paperCards(600, 0, 0), Pod{NumGPU: 2, GPUMilli: 1000}, 50 - 2},
		{"CPU-only pod", paperCards(600), Pod{CPUMilli: 1000}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := packingScore(tt.cards, &tt.pod); got != tt.want {
				t.Errorf("packingScore = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestClusteringScore(t *testing.T) {
	share := &Pod{NumGPU: 1, GPUMilli: 500}
	tests := []struct {
		name string
		aff  map[int]int
		left int64
		pod  *Pod
		want int64
	}{
		{"only the pod's kind", map[int]int{0: 3}, 4000, share, 25*4000/8000 + 75},
		{"the pod's kind among others", map[int]int{0: 1, 2: 1}, 4000, share, 25*4000/8000 + 50},
		{"no GPU pod yet", map[int]int{}, 8000, share, 25},
		{"other kinds only", map[int]int{8: 1}, 0, share, 25},
		{"CPU-only pod", map[int]int{}, 8000, &Pod{CPUMilli: 1}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := clusteringScore(tt.aff, tt.left, tt.pod); got != tt.want {
				t.Errorf("clusteringScore = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestNormalizeMinMax(t *testing.T) {
	for _, tt := range []struct{ in, want []int64 }{
		{[]int64{50, 60, 70}, []int64{0, 50, 100}},
		{[]int64{7, 7}, []int64{0, 0}},
	} {
		got := append([]int64(nil), tt.in...)
		normalizeMinMax(got)
		if !cmp.Equal(got, tt.want) {
			t.Errorf("normalizeMinMax(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// typicalOf builds typical shapes with the given weights (renormalised by
// typicalShapes from pod counts).
func typicalOf(pods ...Pod) *typical { return typicalShapes(pods) }

func TestTypicalFrag(t *testing.T) {
	// Two shapes, half each: a 500-milli share with 4 cores, and a CPU-only pod.
	typ := typicalOf(Pod{CPUMilli: 4000, NumGPU: 1, GPUMilli: 500}, Pod{CPUMilli: 2000})
	v100 := typicalOf(Pod{CPUMilli: 4000, NumGPU: 1, GPUMilli: 500, Models: []string{"V100M32"}})
	tests := []struct {
		name    string
		typ     *typical
		model   string
		cpuLeft int64
		lefts   []int64
		want    float64
	}{
		{"CPU-only shape counts all idle GPU", typ, "T4", 8000, []int64{1000, 1000}, 0.5 * 2000},
		{"card too small for the share", typ, "T4", 8000, []int64{1000, 300}, 0.5*300 + 0.5*1300},
		{"too little CPU: all idle GPU", typ, "T4", 3000, []int64{1000, 300}, 1300},
		{"model the shape does not accept", v100, "T4", 8000, []int64{1000}, 1000},
		{"model it accepts", v100, "V100M32", 8000, []int64{1000}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.typ.frag(tt.model, tt.cpuLeft, tt.lefts); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("frag = %v, want %v", got, tt.want)
			}
		})
	}
}

// FGD's truncated score ties where the simulator's does: the frag is
// summed per kind of fragment, then the kinds in the simulator's order,
// with the simulator's weights (count over all pods, over the kept share).
// Here a 200-milli pod with one core leaves the node's fragmentation
// exactly as it was (+600 stranded for the 700-milli shape, weight 30,
// against -200 idle for shapes of weight 25+21+20+14+10): the simulator's
// sums give a decrease of 0 up to rounding above it, score 50; one running
// sum rounds below it, 49.
func TestFGDScoreRounding(t *testing.T) {
	var pods []Pod
	for _, s := range []struct {
		n int
		p Pod
	}{
		{3, Pod{CPUMilli: 4000, NumGPU: 1, GPUMilli: 500}}, // beyond 95%: dropped
		{21, Pod{CPUMilli: 8000, NumGPU: 1, GPUMilli: 1000}},
		{14, Pod{CPUMilli: 2000}},
		{10, Pod{CPUMilli: 6000, NumGPU: 1, GPUMilli: 300, Models: []string{"V100M32"}}},
		{25, Pod{CPUMilli: 6000, NumGPU: 2, GPUMilli: 1000}},
		{18, Pod{CPUMilli: 1000, NumGPU: 1, GPUMilli: 250}},
		{30, Pod{CPUMilli: 3000, NumGPU: 1, GPUMilli: 700}},
		{20, Pod{CPUMilli: 9000, NumGPU: 4, GPUMilli: 1000}},
	} {
		for range s.n {
			pods = append(pods, s.p)
		}
	}
	typ := typicalShapes(pods)
	before := typ.frag("T4", 5000, []int64{800, 400, 800, 600})
	after := typ.frag("T4", 4000, []int64{800, 400, 600, 600})
	if got := fgdScore(before, after); got != 50 {
		t.Errorf("fgdScore = %d (decrease %g), want 50", got, before-after)
	}
}

// typicalShapes keeps the most frequent shapes up to 95% of the pods and
// renormalises their weights to 1.
func TestTypicalShapes(t *testing.T) {
	var pods []Pod
	add := func(n int, p Pod) {
		for range n {
			pods = append(pods, p)
		}
	}
	add(60, Pod{CPUMilli: 4000, NumGPU: 1, GPUMilli: 500})
	add(36, Pod{CPUMilli: 8000, NumGPU: 1, GPUMilli: 1000, Models: []string{"T4", "P100"}})
	add(4, Pod{CPUMilli: 2000})
	typ := typicalShapes(pods)
	if len(typ.shapes) != 2 {
		t.Fatalf("%d shapes, want the two that cover 96%%", len(typ.shapes))
	}
	if w := typ.shapes[0].weight + typ.shapes[1].weight; math.Abs(w-1) > 1e-12 {
		t.Errorf("weights sum to %v, want 1", w)
	}
	if got := typ.shapes[1].models; !cmp.Equal(got, []string{"T4", "P100"}) {
		t.Errorf("models %v", got)
	}
}

// The ports in a small cluster: every pod either fits or is refused, the
// cluster never holds more than its capacity, and the same seed gives the
// same result.
func TestPortsSynthetic(t *testing.T) {
	nodes, pods := load(t)
	for _, p := range Ports {
		t.Run(string(p), func(t *testing.T) {
			cfg := Config{Nodes: nodes, Pods: pods, Mode: Paper, Policy: p, Seed: 42, MaxArrivalPct: 130}
			r := Run(cfg)
			if r.Placed == 0 || r.Failed == 0 {
				t.Fatalf("placed %d, failed %d", r.Placed, r.Failed)
			}
			if r.Alloc[130] > 100 || r.Alloc[130] < 50 {
				t.Errorf("allocation %.2f%% at 130%%", r.Alloc[130])
			}
			if !cmp.Equal(r, Run(cfg)) {
				t.Error("the same seed gave another result")
			}
		})
	}
}

// A port never places a pod where it does not fit: a share larger than
// any card's room, or a model the node does not have, is refused.
func TestPortFeasible(t *testing.T) {
	cl := newCluster(Paper, []Node{{Name: "a", CPUMilli: 8000, MemoryMiB: 1 << 20, GPUs: 2, Model: "T4"}})
	cl.cards[0][0].Take(protocol.ClassGeneral, 700, 0, true)
	s := newPortSelector(cl, placement.Policy("GpuPacking"), []int{0}, rand.New(rand.NewSource(1)), typicalOf(Pod{NumGPU: 1, GPUMilli: 500}))
	for _, tt := range []struct {
		name string
		pod  Pod
		want bool
	}{
		{"share that fits the free card", Pod{NumGPU: 1, GPUMilli: 900}, true},
		{"two whole cards, one used", Pod{NumGPU: 2, GPUMilli: 1000}, false},
		{"other model", Pod{NumGPU: 1, GPUMilli: 100, Models: []string{"V100M32"}}, false},
		{"too much CPU", Pod{CPUMilli: 9000}, false},
	} {
		if got := s.feasible(0, &tt.pod); got != tt.want {
			t.Errorf("%s: feasible = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A pod asking a share of a card takes the card the simulator's Reserve
// gives it: the tightest that fits for the ports configured with "best",
// and for FGD the first card with FGD's best score. Here the typical pod
// asks 500: the 400-milli pod on the 600 card (the tightest) leaves 200
// no typical pod fits, on a free card it leaves 600 that one fits.
func TestShareCard(t *testing.T) {
	pod := Pod{CPUMilli: 1000, NumGPU: 1, GPUMilli: 400}
	typ := typicalOf(Pod{CPUMilli: 1000, NumGPU: 1, GPUMilli: 500})
	tests := []struct {
		policy placement.Policy
		used   []int64
		want   int
	}{
		{GpuPacking, []int64{0, 400, 0}, 1},
		{GpuClustering, []int64{0, 400, 0}, 1},
		{BestFit, []int64{0, 400, 0}, 1},
		{DotProd, []int64{0, 400, 0}, 1},
		{FGD, []int64{0, 400, 0}, 0},
		{FGD, []int64{400, 0, 700}, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %v", tt.policy, tt.used), func(t *testing.T) {
			cl := newCluster(Paper, []Node{{Name: "a", CPUMilli: 8000, MemoryMiB: 1 << 20, GPUs: len(tt.used), Model: "T4"}})
			for i, u := range tt.used {
				if u > 0 {
					cl.cards[0][i].Take(protocol.ClassGeneral, u, 0, true)
				}
			}
			s := newPortSelector(cl, tt.policy, []int{0}, rand.New(rand.NewSource(1)), typ)
			s.allocate(0, &pod)
			var got []int64
			for i := range cl.cards[0] {
				got = append(got, milli-left(&cl.cards[0][i]))
			}
			want := slices.Clone(tt.used)
			want[tt.want] += pod.GPUMilli
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("GPU-milli used per card after the pod (-want +got):\n%s", diff)
			}
		})
	}
}

// Random draws the simulator's numbers: one Intn over the feasible nodes
// listed by name (the scheduler's node list), none when a single node is
// feasible (kube-scheduler does not score then), whatever the tie order.
func TestRandomPort(t *testing.T) {
	node := func(name string, cpu int64) Node {
		return Node{Name: name, CPUMilli: cpu, MemoryMiB: 1 << 20, GPUs: 1, Model: "T4"}
	}
	tests := []struct {
		name  string
		nodes []Node
		// want is the node taking the pod given the first Intn(feasible)
		// of the source; draws is how many numbers place takes from it.
		want  func(first int) int
		draws int
	}{
		{"three feasible, drawn by name", []Node{node("c", 8000), node("b", 8000), node("a", 8000)},
			func(first int) int { return []int{2, 1, 0}[first] }, 1},
		{"one feasible, no draw", []Node{node("c", 8000), node("b", 100), node("a", 100)},
			func(int) int { return 0 }, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := int64(1); seed <= 6; seed++ {
				cl := newCluster(Paper, tt.nodes)
				s := newPortSelector(cl, Random, []int{0, 1, 2}, rand.New(rand.NewSource(seed)), typicalOf(Pod{CPUMilli: 1000}))
				if !s.place(&Pod{CPUMilli: 1000}) {
					t.Fatal("no node took the pod")
				}
				ref := rand.New(rand.NewSource(seed))
				want := tt.want(ref.Intn(3))
				if cl.cpuLeft[want] != tt.nodes[want].CPUMilli-1000 {
					t.Errorf("seed %d: the pod went elsewhere than node %s (cpu left %v)", seed, tt.nodes[want].Name, cl.cpuLeft)
				}
				ref = rand.New(rand.NewSource(seed))
				for range tt.draws {
					ref.Int63()
				}
				if got, next := s.rng.Int63(), ref.Int63(); got != next {
					t.Errorf("seed %d: place took other than %d draws from the source", seed, tt.draws)
				}
			}
		})
	}
}

func TestReadPodsVariants(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content string
		want          []Pod
		err           string
	}{
		{"multigpu: no gpu_spec", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,4000,1024,2,1000\n",
			[]Pod{{Name: "p1", CPUMilli: 4000, MemoryMiB: 1024, NumGPU: 2, GPUMilli: 1000}}, ""},
		{"gpu_spec later", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,gpu_spec\np1,4000,1024,1,500,LS,T4|P100\n",
			[]Pod{{Name: "p1", CPUMilli: 4000, MemoryMiB: 1024, NumGPU: 1, GPUMilli: 500, Models: []string{"T4", "P100"}}}, ""},
		{"nan spec", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np1,1,1,1,10,nan\n",
			[]Pod{{Name: "p1", CPUMilli: 1, MemoryMiB: 1, NumGPU: 1, GPUMilli: 10}}, ""},
		{"share over several cards", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1,1,2,500\n", nil, "num_gpu 2 with gpu_milli 500"},
		{"share above a card", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1,1,1,1500\n", nil, "gpu_milli 1500"},
		{"not a number", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,x,1,1,10\n", nil, "field 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "p.csv")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadPods(path)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// FuzzReadPods: any bytes give pods or an error, never a panic, and every
// pod read is one the replay can place.
func FuzzReadPods(f *testing.F) {
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1,1,1,500,T4\n")
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,8,1000\n")
	f.Fuzz(func(t *testing.T, content string) {
		path := filepath.Join(t.TempDir(), "p.csv")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		pods, err := ReadPods(path)
		if err != nil {
			return
		}
		for i := range pods {
			if err := checkPod(&pods[i]); err != nil {
				t.Fatalf("ReadPods returned a pod it should refuse: %v", err)
			}
		}
	})
}
