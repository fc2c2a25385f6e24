package qgpu

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/args"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

func TestPreFilter(t *testing.T) {
	tests := []struct {
		name     string
		pod      *v1.Pod
		wantCode fwk.Code
		wantMsg  string
	}{
		{"no qGPU request is skipped", builders.GPUPod("plain").Container("c", nil).Obj(), fwk.Skip, ""},
		{"general", builders.GPUPod("g").General("c", 5, 30).Obj(), fwk.Success, ""},
		{"core 150 can never fit", builders.GPUPod("g").General("c", 5, 150).Obj(), fwk.UnschedulableAndUnresolvable, "value 150 above 100 must be a multiple of 100"},
		{"online with cores", builders.GPUPod("o").Online("c", 4).Container("d", map[string]int64{protocol.ResourceMemory: 1, protocol.ResourceCore: 10}).Obj(),
			fwk.UnschedulableAndUnresolvable, "online pods ask for tke.cloud.tencent.com/qgpu-memory only"},
		{"unknown class", builders.GPUPod("x").Class("batch").General("c", 1, 10).Obj(), fwk.UnschedulableAndUnresolvable, `unsupported value "batch"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlugin(t, nil)
			_, st := p.PreFilter(context.Background(), framework.NewCycleState(), tt.pod, nil)
			if st.Code() != tt.wantCode {
				t.Fatalf("code = %v, want %v (%v)", st.Code(), tt.wantCode, st)
			}
			if !strings.Contains(st.Message(), tt.wantMsg) {
				t.Errorf("message %q does not contain %q", st.Message(), tt.wantMsg)
			}
		})
	}
}

func TestFilterWithoutPreFilter(t *testing.T) {
	p := newPlugin(t, nil)
	n := t4Node("n1", 1, false)
	p.setNodes(n)
	st := p.Filter(context.Background(), framework.NewCycleState(), builders.GPUPod("g").General("c", 1, 1).Obj(), nodeInfo(n))
	if st.Code() != fwk.Error || !strings.Contains(st.Message(), `reading "QGPU" from cycleState`) {
		t.Fatalf("got %v", st)
	}
}

func TestFilter(t *testing.T) {
	plain := t4Node("plain", 2, false)
	plain.Labels = map[string]string{}
	noInv := t4Node("noinv", 2, false)
	delete(noInv.Annotations, protocol.AnnotationInventory)
	badInv := t4Node("badinv", 2, false)
	badInv.Annotations[protocol.AnnotationInventory] = `{"version":"qgpu.io/v1","cards":[{"index":0,"uuid":"a","memoryMiB":-1}]}`
	tests := []struct {
		name     string
		node     *v1.Node
		pod      *v1.Pod
		wantCode fwk.Code
		wantMsg  string
	}{
		{"general fits", t4Node("n", 2, false), builders.GPUPod("p").General("c", 5, 30).Obj(), fwk.Success, ""},
		{"not a qGPU node", plain, builders.GPUPod("p").General("c", 5, 30).Obj(), fwk.UnschedulableAndUnresolvable, ReasonNotQGPUNode},
		{"no inventory", noInv, builders.GPUPod("p").General("c", 5, 30).Obj(), fwk.UnschedulableAndUnresolvable, ReasonNoInventory},
		{"invalid inventory", badInv, builders.GPUPod("p").General("c", 5, 30).Obj(), fwk.UnschedulableAndUnresolvable, ReasonNoInventory},
		{"memory larger than any card", t4Node("n", 2, false), builders.GPUPod("p").General("c", 15, 30).Obj(), fwk.Unschedulable, placement.ReasonCardsFull},
		{"online needs a mixed node", t4Node("n", 2, false), builders.GPUPod("p").Online("c", 4).Obj(), fwk.UnschedulableAndUnresolvable, placement.ReasonNotMixed},
		{"online on mixed node", t4Node("n", 2, true), builders.GPUPod("p").Online("c", 4).Obj(), fwk.Success, ""},
		{"offline on mixed node", t4Node("n", 2, true), builders.GPUPod("p").Offline("c", 4, 50).Obj(), fwk.Success, ""},
		{"whole cards: 2 of 2", t4Node("n", 2, false), builders.GPUPod("p").General("c", 20, 200).Obj(), fwk.Success, ""},
		{"whole cards: 3 of 2", t4Node("n", 2, false), builders.GPUPod("p").General("c", 3, 300).Obj(), fwk.Unschedulable, placement.ReasonWholeCards},
		{"use-gputype matches", t4Node("n", 1, false), builders.GPUPod("p").Annotation(protocol.AnnotationUseGPUType, "t4").General("c", 1, 10).Obj(), fwk.Success, ""},
		{"use-gputype does not match", t4Node("n", 1, false), builders.GPUPod("p").Annotation(protocol.AnnotationUseGPUType, "V100").General("c", 1, 10).Obj(), fwk.UnschedulableAndUnresolvable, placement.ReasonNoModel},
		{"nouse-gputype excludes", t4Node("n", 1, false), builders.GPUPod("p").Annotation(protocol.AnnotationNoUseGPUType, "T4").General("c", 1, 10).Obj(), fwk.UnschedulableAndUnresolvable, placement.ReasonNoModel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlugin(t, nil)
			p.setNodes(tt.node)
			cs := framework.NewCycleState()
			if _, st := p.PreFilter(context.Background(), cs, tt.pod, nil); !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			st := p.Filter(context.Background(), cs, tt.pod, nodeInfo(tt.node))
			if st.Code() != tt.wantCode || !strings.Contains(st.Message(), tt.wantMsg) {
				t.Fatalf("got %v %q, want %v %q", st.Code(), st.Message(), tt.wantCode, tt.wantMsg)
			}
		})
	}
}

// The memory / 4 rule fills a card: 14 GiB T4 takes 14 one-GiB pods by memory but
// only Mc/4 = 3 pods, and 100 cores.
func TestNeverOversubscribes(t *testing.T) {
	p := newPlugin(t, nil)
	n := t4Node("n1", 1, false)
	p.setNodes(n)
	placed := 0
	for i := range 10 {
		pod := builders.GPUPod("p"+string(rune('a'+i))).General("c", 1, 30).Obj()
		if node, _ := schedule(t, p, pod, n); node != "" {
			placed++
		}
	}
	if placed != 3 {
		t.Fatalf("placed %d pods of 30 cores on one card, want 3 (cores 90 ≤ 100, then a 4th would need 120)", placed)
	}
	c, _ := p.ledger.CopyNode("n1", nil)
	if diff := cmp.Diff([]int64{3, 90}, []int64{c.Cards[0].UsedMemoryGiB, c.Cards[0].UsedCores}); diff != "" {
		t.Fatal(diff)
	}
}

func TestBinpackAndSpread(t *testing.T) {
	for _, tt := range []struct {
		policy string
		want   []string
	}{
		{"binpack", []string{"a", "a", "a"}},
		{"spread", []string{"a", "b", "a"}},
	} {
		t.Run(tt.policy, func(t *testing.T) {
			p := newPlugin(t, &args.QGPUArgs{NodePolicy: tt.policy, CardPolicy: tt.policy})
			a, b := v100Node("a", 1, false), v100Node("b", 1, false)
			p.setNodes(a, b)
			var got []string
			for i := range 3 {
				node, st := schedule(t, p, builders.GPUPod("p"+string(rune('0'+i))).General("c", 4, 20).Obj(), a, b)
				if st != nil {
					t.Fatal(st)
				}
				got = append(got, node)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatal(diff)
			}
		})
	}
}

func TestPreBindWritesAssignmentAndReplacesForgedOne(t *testing.T) {
	forged := `{"version":"qgpu.io/v1","podUID":"x","node":"n1","class":"general","containers":[{"name":"c","slices":[{"index":1,"uuid":"GPU-Tesla-T4-01","memoryGiB":1,"cores":100}]}]}`
	pod := builders.GPUPod("p").General("c", 5, 30).Annotation(protocol.AnnotationAssignment, forged).Obj()
	p := newPlugin(t, nil, pod)
	n := t4Node("n1", 2, false)
	p.setNodes(n)
	if _, st := schedule(t, p, pod, n); st != nil {
		t.Fatal(st)
	}
	got, err := p.handle.ClientSet().CoreV1().Pods("default").Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := protocol.DecodeAssignment([]byte(got.Annotations[protocol.AnnotationAssignment]))
	if err != nil {
		t.Fatal(err)
	}
	want := &protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: "uid-p", Node: "n1", Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{{Index: 0, UUID: "GPU-Tesla-T4-00", MemoryGiB: 5, Cores: 30}}}}}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Fatal(diff)
	}
}

func TestUnreserveIsIdempotent(t *testing.T) {
	p := newPlugin(t, nil)
	n := t4Node("n1", 1, false)
	p.setNodes(n)
	pod := builders.GPUPod("p").General("c", 5, 30).Obj()
	cs := framework.NewCycleState()
	ctx := context.Background()
	p.PreFilter(ctx, cs, pod, nil)
	if st := p.Reserve(ctx, cs, pod, "n1"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Reserve(ctx, cs, pod, "n1"); st.IsSuccess() {
		t.Fatal("a second Reserve of the same pod must fail")
	}
	p.Unreserve(ctx, cs, pod, "other-node") // never frees a decision on another node
	if _, ok := p.ledger.Holding(pod.UID); !ok {
		t.Fatal("Unreserve on another node freed the slice")
	}
	p.Unreserve(ctx, cs, pod, "n1")
	p.Unreserve(ctx, cs, pod, "n1")
	c, _ := p.ledger.CopyNode("n1", nil)
	if c.Cards[0].UsedMemoryGiB != 0 || c.Cards[0].Pods() != 0 {
		t.Fatalf("card not freed: %+v", c.Cards[0])
	}
}

// binpack stretches the raw scores linearly onto [0, 100].
func TestNormalizeScore(t *testing.T) {
	p := newPlugin(t, &args.QGPUArgs{NodePolicy: "binpack", CardPolicy: "binpack"})
	scores := fwk.NodeScoreList{{Name: "a", Score: 10}, {Name: "b", Score: 30}, {Name: "c", Score: 20}}
	p.NormalizeScore(context.Background(), nil, nil, scores)
	if diff := cmp.Diff(fwk.NodeScoreList{{Name: "a", Score: 0}, {Name: "b", Score: 100}, {Name: "c", Score: 50}}, scores); diff != "" {
		t.Fatal(diff)
	}
}

func TestNewRejectsBadArgs(t *testing.T) {
	_, err := New(context.Background(), &args.QGPUArgs{NodePolicy: "pack", CardPolicy: "binpack"}, &fakeHandle{})
	if err == nil || !strings.Contains(err.Error(), `nodePolicy: Unsupported value: "pack"`) {
		t.Fatalf("got %v", err)
	}
}

// PreFilter narrows the cycle to the nodes that can ever take the pod, and
// leaves it whole when that is no narrower or when no node qualifies (so
// that Filter's reasons name the fault).
func TestPreFilterNarrowsNodes(t *testing.T) {
	plainNode := func(name string) *v1.Node {
		n := t4Node(name, 2, false)
		n.Labels = map[string]string{}
		return n
	}
	plain := plainNode("plain")
	noInv := t4Node("noinv", 2, false)
	delete(noInv.Annotations, protocol.AnnotationInventory)
	general := builders.GPUPod("g").General("c", 5, 30).Obj()
	online := builders.GPUPod("o").Online("c", 4).Obj()
	offline := builders.GPUPod("off").Offline("c", 4, 50).Obj()
	tests := []struct {
		name  string
		nodes []*v1.Node
		pod   *v1.Pod
		want  []string // nil: all nodes
	}{
		{"general: qGPU nodes only", []*v1.Node{t4Node("a", 2, false), plain, plainNode("p2"), plainNode("p3"), noInv}, general, []string{"a", "noinv"}},
		{"online: mixed nodes only", []*v1.Node{t4Node("a", 2, false), t4Node("b", 2, true), plain}, online, []string{"b"}},
		{"offline: mixed nodes only", []*v1.Node{t4Node("a", 2, false), t4Node("a2", 2, false), t4Node("b", 2, true)}, offline, []string{"b"}},
		{"narrowing does not pay", []*v1.Node{t4Node("a", 2, false), t4Node("b", 2, true)}, offline, nil},
		{"every node qualifies", []*v1.Node{t4Node("a", 2, false), t4Node("b", 2, true)}, general, nil},
		{"no mixed node: Filter says why", []*v1.Node{t4Node("a", 2, false), plain}, online, nil},
		{"no qGPU node: Filter says why", []*v1.Node{plain, plain}, general, nil},
		{"broken inventory: Filter says why", []*v1.Node{t4Node("a", 2, false), noInv}, general, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlugin(t, nil)
			p.setNodes(tt.nodes...)
			var infos []fwk.NodeInfo
			for _, n := range tt.nodes {
				infos = append(infos, nodeInfo(n))
			}
			res, st := p.PreFilter(context.Background(), framework.NewCycleState(), tt.pod, infos)
			if !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			if tt.want == nil {
				if !res.AllNodes() {
					t.Fatalf("nodes %v, want all", sets.List(res.NodeNames))
				}
				return
			}
			if res.AllNodes() || !cmp.Equal(tt.want, sets.List(res.NodeNames)) {
				t.Fatalf("nodes %v, want %v", res, tt.want)
			}
		})
	}
}

func TestNarrowingPays(t *testing.T) {
	tests := []struct {
		eligible, nodes int
		want            bool
	}{
		{250, 500, true},    // half the nodes mixed, as in make bench-throughput
		{2500, 5000, false}, // the same at SIZE=large: 750 evaluated instead of 500
		{100, 1100, true},   // a few GPU nodes among many CPU ones
		{500, 5000, true},   // a tenth of a large cluster
		{4900, 5000, false}, // almost all
		{50, 80, false},     // small cluster: every node is evaluated anyway; listing 50 costs more than turning 30 away
		{20, 80, true},      // small cluster, few eligible
		{500, 500, false},   // all
	}
	for _, tt := range tests {
		if got := narrowingPays(tt.eligible, tt.nodes); got != tt.want {
			t.Errorf("narrowingPays(%d, %d) = %v, want %v", tt.eligible, tt.nodes, got, tt.want)
		}
	}
}
