package integration

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

// The sizes of TestSchedulerTracksReplayAtScale. A quarter of the trace's
// 1213 nodes keeps its mix of models and node sizes (every fourth node of
// the list, which is sorted by model) while one pod at a time, created and
// waited for, stays well under the test's time budget; arrivals up to 130%
// of the sampled GPU capacity are a few thousand pods and fill the cluster
// as far as the policy can, so the allocation compared is the policy's.
const (
	scaleNodes      = 300
	scaleArrivalPct = 130
	// scaleSeed orders the arrivals (sim.Arrivals) and breaks the replay's ties.
	scaleSeed = 42
	// scaleMaxDiff is how far, in points of GPU capacity, the scheduler's
	// final allocation may be from the replay's (issue 16).
	scaleMaxDiff = 0.3
)

// TestSchedulerTracksReplayAtScale places a few thousand pods of the
// Alibaba openb trace (CPU-only ones included: the fragmentation-aware
// policies place and learn them too) on a few hundred of its nodes, one at
// a time, through the real scheduler binary with the shipped default
// profile (which scores every node, as the replay does), and through the
// trace replay (qgpu mode, the policy that profile configures), both from a
// cold start: no typical shapes until they learn them from the pods they
// place. A pod the scheduler cannot place is deleted, as the replay drops
// it. Beside the independent replay, a second one follows the scheduler's
// choices (sim.Stepper.PlaceOn) to say, pod by pod, whether the scheduler
// chose a node the replay ranks first and the cards the replay takes
// there. The final allocations must agree within scaleMaxDiff.
func TestSchedulerTracksReplayAtScale(t *testing.T) {
	nodes, pods, order := scaleTrace(t, traceDir(t))
	policy, err := sim.ProfilePolicy(repoFile(t, sim.DefaultProfile))
	if err != nil {
		t.Fatal(err)
	}
	profile := repoFile(t, sim.DefaultProfile)
	if raw, err := os.ReadFile(profile); err != nil || !strings.Contains(string(raw), "\npercentageOfNodesToScore: 100\n") {
		t.Fatalf("%s must score every node (percentageOfNodesToScore: 100), as the replay does (err: %v)", sim.DefaultProfile, err)
	}
	cp := harness.Start(t)
	for i := range nodes {
		createNodes(t, cp.Client, traceNode(t, &nodes[i]))
	}
	harness.StartQGPUScheduler(t, cp, profile)
	replay := sim.NewStepper(sim.QGPU, nodes, policy, scaleSeed)
	follow := sim.NewStepper(sim.QGPU, nodes, policy, scaleSeed)
	w := watchPods(t, cp.Client, "default")
	tally := scaleTally{firstApart: -1}
	start := time.Now()
	for k, i := range order {
		p := &pods[i]
		req := replay.Request(p)
		replayBest := replay.Best(p, req)
		replay.Place(p, req)
		best := follow.Best(p, req)
		pod := tracePod(t, "trace-"+strconv.Itoa(k), p, req)
		createPods(t, cp.Client, pod)
		got := w.outcome(t, pod.Name)
		if got.Spec.NodeName == "" {
			deletePod(t, cp.Client, pod)
			tally.pending(len(best) > 0)
			continue
		}
		n := slices.IndexFunc(nodes, func(n sim.Node) bool { return n.Name == got.Spec.NodeName })
		cards, ok := follow.PlaceOn(n, p, req)
		if !ok {
			t.Fatalf("pod %s: the scheduler bound it to %s, where the replay finds no room", pod.Name, got.Spec.NodeName)
		}
		tally.bound(slices.Contains(best, n), slices.Equal(cards, assignmentCards(t, got, req)))
		if len(best) > 1 {
			tally.tied++
		}
		if !slices.Equal(replayBest, best) && tally.firstApart < 0 {
			tally.firstApart = k
		}
	}
	elapsed := time.Since(start)
	sched := boundAllocation(t, cp.Client, nodes, pods, order)
	if math.Abs(sched-follow.Allocation()) > 1e-9 {
		t.Fatalf("the API holds %.4f%% allocated, the pods the test saw bound %.4f%%", sched, follow.Allocation())
	}
	t.Logf("%s, %d nodes, %d pods in %v: %s", policy, len(nodes), len(order), elapsed.Round(time.Second), tally)
	t.Logf("GPU allocation: scheduler %.2f%%, replay %.2f%% (diff %.2f points)", sched, replay.Allocation(), sched-replay.Allocation())
	if tally.cardsDiffer > 0 {
		t.Errorf("%d pods took other cards than the replay takes on their node", tally.cardsDiffer)
	}
	if d := math.Abs(sched - replay.Allocation()); d > scaleMaxDiff {
		t.Errorf("allocations differ by %.2f points, want ≤ %.1f", d, scaleMaxDiff)
	}
	checkCluster(t, cp.Client)
}

// scaleTally counts how the scheduler's choices compare with the replay's.
type scaleTally struct {
	placed, firstRank, cardsDiffer int
	// pendingFits counts pods the scheduler left pending while the replay,
	// in the scheduler's state, had a node for them.
	unplaced, pendingFits int
	// tied counts pods with more than one best node; firstApart is the
	// first pod for which the two replays' best nodes differ (-1: none).
	tied, firstApart int
}

func (s *scaleTally) bound(firstRank, sameCards bool) {
	s.placed++
	if firstRank {
		s.firstRank++
	}
	if !sameCards {
		s.cardsDiffer++
	}
}

func (s *scaleTally) pending(replayFits bool) {
	s.unplaced++
	if replayFits {
		s.pendingFits++
	}
}

func (s scaleTally) String() string {
	return strconv.Itoa(s.placed) + " bound, " + strconv.Itoa(s.firstRank) + " (" +
		strconv.FormatFloat(float64(s.firstRank)*100/float64(max(s.placed, 1)), 'f', 1, 64) +
		"%) on a node the replay ranks first, " + strconv.Itoa(s.cardsDiffer) + " on other cards; " +
		strconv.Itoa(s.unplaced) + " unschedulable (" + strconv.Itoa(s.pendingFits) + " of them with a node in the replay); " +
		strconv.Itoa(s.tied) + " with tied best nodes; replays apart from pod " + strconv.Itoa(s.firstApart)
}

// traceDir is $QGPU_TRACES, the directory holding the openb node list and
// default pod list (make integration sets it). Without them the test
// skips, or fails where QGPU_TRACES_REQUIRED=1 (CI, which has them).
func traceDir(t *testing.T) string {
	dir := os.Getenv("QGPU_TRACES")
	for _, f := range []string{"openb_node_list_gpu_node.csv", "openb_pod_list_default.csv"} {
		if _, err := os.Stat(filepath.Join(dir, f)); dir == "" || err != nil {
			msg := fmt.Sprintf("QGPU_TRACES=%q has no %s: set it to a directory holding the openb trace (hack/fetch-traces.sh DIR fetches it; make integration sets it)", dir, f)
			if os.Getenv("QGPU_TRACES_REQUIRED") == "1" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	return dir
}

// scaleTrace samples scaleNodes nodes of the trace (evenly through the
// list) and returns them, the trace's pods, and the arrival order:
// sim.Arrivals up to scaleArrivalPct of the sample's capacity. The pods
// include the CPU-only ones (13% of the trace): the fragmentation-aware
// policies place them too, and learn their shape.
func scaleTrace(t *testing.T, dir string) ([]sim.Node, []sim.Pod, []int) {
	all, err := sim.ReadNodes(filepath.Join(dir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	trace, err := sim.ReadPods(filepath.Join(dir, "openb_pod_list_default.csv"))
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]sim.Node, scaleNodes)
	var capacity int64
	for i := range nodes {
		nodes[i] = all[i*len(all)/scaleNodes]
		capacity += int64(nodes[i].GPUs) * 1000
	}
	return nodes, trace, sim.Arrivals(trace, capacity, scaleArrivalPct, rand.New(rand.NewSource(scaleSeed)))
}

// traceNode is a qGPU node of the trace's cards (sim.CardMemoryMiB), CPU
// and memory, with room for any number of pods, as the replay has.
func traceNode(t *testing.T, n *sim.Node) *corev1.Node {
	mib, ok := sim.CardMemoryMiB[n.Model]
	if !ok {
		t.Fatalf("node %s: model %q has no memory in sim.CardMemoryMiB", n.Name, n.Model)
	}
	node := builders.GPUNode(n.Name, false, builders.Cards(n.GPUs, n.Model, mib))
	for _, l := range []corev1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		l[corev1.ResourceCPU] = *resource.NewMilliQuantity(n.CPUMilli, resource.DecimalSI)
		l[corev1.ResourceMemory] = *resource.NewQuantity(n.MemoryMiB<<20, resource.BinarySI)
		l[corev1.ResourcePods] = *resource.NewQuantity(1000, resource.DecimalSI)
	}
	return node
}

// tracePod is the trace pod as a pod of qgpu-scheduler asking for what the
// replay's converter made of it (req: a qGPU container, or none for a
// CPU-only pod), its CPU and memory; the test fails if the scheduler's
// parser would read it otherwise.
func tracePod(t *testing.T, name string, p *sim.Pod, req *request.Request) *corev1.Pod {
	b := builders.GPUPod(name)
	if len(req.Containers) > 0 {
		c := req.Containers[0]
		b.General("c", c.MemoryGiB, c.Cores)
	}
	if len(req.UseTypes) > 0 && len(req.Containers) > 0 {
		b.Annotation(protocol.AnnotationUseGPUType, strings.Join(req.UseTypes, ","))
	}
	pod := b.CPU(p.CPUMilli).Obj()
	pod.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(p.MemoryMiB<<20, resource.BinarySI)
	parsed, err := request.Parse(pod)
	if err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	if len(req.Containers) == 0 {
		if parsed != nil {
			t.Fatalf("pod %s: the scheduler reads a qGPU request from a CPU-only pod: %+v", name, parsed)
		}
		return pod
	}
	type shape struct {
		Containers           []request.Container
		UseTypes, NoUseTypes []string
	}
	if diff := cmp.Diff(shape{req.Containers, req.UseTypes, nil}, shape{parsed.Containers, parsed.UseTypes, parsed.NoUseTypes}); diff != "" {
		t.Fatalf("pod %s: the scheduler reads another request than the replay's (-replay +scheduler):\n%s", name, diff)
	}
	return pod
}

// deletePod deletes a pod the scheduler left pending, so that it takes no
// room later: the replay drops a pod that fits nowhere, never retried.
func deletePod(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	err := cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil {
		t.Fatalf("deleting pending pod %s: %v", pod.Name, err)
	}
}

// assignmentCards are the card indexes of a bound pod's assignment; none
// for a CPU-only pod (req without containers), which must have none.
func assignmentCards(t *testing.T, pod *corev1.Pod, req *request.Request) []int {
	t.Helper()
	if len(req.Containers) == 0 {
		if v, ok := pod.Annotations[protocol.AnnotationAssignment]; ok {
			t.Fatalf("CPU-only pod %s bound with a qGPU assignment %s", pod.Name, v)
		}
		return nil
	}
	a, err := protocol.DecodeAssignment([]byte(pod.Annotations[protocol.AnnotationAssignment]))
	if err != nil {
		t.Fatalf("pod %s: bound without a valid assignment: %v", pod.Name, err)
	}
	return assignedCards(a)
}

// boundAllocation is the share of the nodes' GPU capacity, in %, that the
// pods bound in the API ask for, in the trace's GPU-milli.
func boundAllocation(t *testing.T, cs kubernetes.Interface, nodes []sim.Node, pods []sim.Pod, order []int) float64 {
	t.Helper()
	list, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var capacity, allocated int64
	for i := range nodes {
		capacity += int64(nodes[i].GPUs) * 1000
	}
	for _, pod := range list.Items {
		k, err := strconv.Atoi(strings.TrimPrefix(pod.Name, "trace-"))
		if err != nil || k >= len(order) {
			t.Fatalf("pod %s is not one of the test's", pod.Name)
		}
		if pod.Spec.NodeName != "" {
			allocated += pods[order[k]].GPUDemand()
		}
	}
	return float64(allocated) * 100 / float64(capacity)
}

func repoFile(t *testing.T, rel string) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, rel)
}
