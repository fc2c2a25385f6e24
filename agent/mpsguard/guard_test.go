package mpsguard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	qnvml "github.com/qgpu-scheduler/qgpu/agent/nvml"
)

// node is a simulated MPS node: three cards in NVML, --mps-root with the
// cards' state files, the host's proc file system (parents only), the
// node's pods and what the guard reported.
type node struct {
	t        *testing.T
	nvml     *qnvml.Fake
	root     string
	procRoot string
	pids     map[uint32]string // pid → pod UID
	pods     []*v1.Pod
	obs      *observer
	recorder *record.FakeRecorder
	mu       sync.Mutex
	deleted  []string
	failDel  error
}

func newNode(t *testing.T) *node {
	t.Helper()
	f := qnvml.NewFake([]qnvml.FakeCard{{Model: "A100", MemoryMiB: 40960}, {Model: "A100", MemoryMiB: 40960},
		{Model: "A100", MemoryMiB: 40960}}, "n1", "")
	return &node{t: t, nvml: f, root: t.TempDir(), procRoot: t.TempDir(), pids: map[uint32]string{},
		obs: &observer{foreign: map[CardID]int{}, evicted: map[CardID]int{}}, recorder: record.NewFakeRecorder(100)}
}

// card marks card i's state under --mps-root: its daemon ready (or not),
// handed out whole (or not), and the daemon's PID (0: none).
func (n *node) card(i int, ready, whole bool, daemon int) {
	dir := filepath.Join(n.root, n.nvml.UUID(i))
	must(n.t, os.MkdirAll(dir, 0o755))
	for name, on := range map[string]bool{enforce.MPSReadyFile: ready, enforce.MPSWholeFile: whole} {
		if on {
			must(n.t, os.WriteFile(filepath.Join(dir, name), nil, 0o644))
		} else {
			os.Remove(filepath.Join(dir, name))
		}
	}
	if daemon != 0 {
		must(n.t, os.WriteFile(filepath.Join(dir, enforce.MPSDaemonPIDFile), []byte(fmt.Sprintf("%d\n", daemon)), 0o644))
	}
}

// proc puts a process into the host's proc file system with its parent
// (a command with spaces and parentheses, as /proc/<pid>/stat may hold)
// and its pod ("" none).
func (n *node) proc(pid, parent uint32, podUID string) {
	dir := filepath.Join(n.procRoot, fmt.Sprint(pid))
	must(n.t, os.MkdirAll(dir, 0o755))
	stat := fmt.Sprintf("%d (my (odd) cmd) S %d %d 0 0\n", pid, parent, pid)
	must(n.t, os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644))
	n.pids[pid] = podUID
}

func (n *node) pod(uid, name string, deleting bool) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "team", Name: name}}
	if deleting {
		p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	}
	n.pods = append(n.pods, p)
	return p
}

func (n *node) PodUID(pid uint32) (string, error) {
	uid, ok := n.pids[pid]
	if !ok {
		return "", errors.New("no such process")
	}
	return uid, nil
}

func (n *node) guard(policy Policy, active bool) *Guard {
	n.t.Helper()
	devices := map[string]nvml.Device{}
	var cards []CardID
	for i := range 3 {
		dev, _ := n.nvml.DeviceGetHandleByIndex(i)
		devices[n.nvml.UUID(i)] = dev
		cards = append(cards, CardID{Index: i, UUID: n.nvml.UUID(i)})
	}
	g, err := New(Config{Node: "n1", Root: n.root, Cards: cards, Devices: devices,
		Active: func() bool { return active }, Procs: n, ProcRoot: n.procRoot,
		Pods:   func() ([]*v1.Pod, error) { return n.pods, nil },
		Policy: policy, Delete: n.delete, Recorder: n.recorder, Observer: n.obs, Poll: 5 * time.Millisecond})
	if err != nil {
		n.t.Fatal(err)
	}
	return g
}

func (n *node) delete(_ context.Context, p *v1.Pod) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failDel != nil {
		return n.failDel
	}
	n.deleted = append(n.deleted, p.Namespace+"/"+p.Name)
	return nil
}

func (n *node) events() []string {
	var out []string
	for {
		select {
		case e := <-n.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

type observer struct {
	mu               sync.Mutex
	foreign, evicted map[CardID]int
}

func (o *observer) ForeignProcesses(c CardID, k int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.foreign[c] = k
}

func (o *observer) Evicted(c CardID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.evicted[c]++
}

func (o *observer) counts() (foreign, evicted map[int]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	foreign, evicted = map[int]int{}, map[int]int{}
	for c, k := range o.foreign {
		foreign[c.Index] = k
	}
	for c, k := range o.evicted {
		evicted[c.Index] = k
	}
	return foreign, evicted
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mpsCard0 is card 0 shared through MPS with daemon 50: its server 60 (the
// daemon's child), a client 100 (M+C), a process 300 of pod "rogue" that
// pointed CUDA_MPS_PIPE_DIRECTORY elsewhere and a host process 400 in no
// pod, both plain compute (C). Card 1's daemon is not ready and card 2 is
// handed out whole: their plain processes are none of the guard's business.
func mpsCard0(n *node) {
	n.card(0, true, false, 50)
	n.card(1, false, false, 0)
	n.card(2, true, true, 0)
	n.proc(50, 1, "")
	n.proc(60, 50, "")
	n.proc(100, 1, "uid-client")
	n.proc(300, 1, "uid-rogue")
	n.proc(400, 1, "")
	n.pod("uid-client", "client", false)
	for _, pid := range []uint32{60, 100, 300, 400} {
		n.nvml.SetProcess(0, pid, 0)
	}
	n.nvml.SetMPSClient(0, 100, true)
	n.nvml.SetProcess(1, 500, 0)
	n.nvml.SetProcess(2, 600, 0)
}

// TestReport: the default policy reports the processes that bypass MPS on
// an MPS-shared card once each, after two polls saw them, on their pod or
// else on the Node, sets the metric and deletes nothing; the server and
// the clients are not reported, nor anything on a card that is not shared
// through MPS now.
func TestReport(t *testing.T) {
	n := newNode(t)
	mpsCard0(n)
	n.pod("uid-rogue", "rogue", false)
	g := n.guard(PolicyReport, true)
	g.Poll(context.Background())
	if ev := n.events(); len(ev) != 0 {
		t.Errorf("first sight reported: %q", ev)
	}
	foreign, _ := n.obs.counts()
	if diff := cmp.Diff(map[int]int{0: 2, 1: 0, 2: 0}, foreign); diff != "" {
		t.Errorf("foreign processes per card (-want +got):\n%s", diff)
	}
	g.Poll(context.Background())
	ev := n.events()
	if len(ev) != 2 || !strings.Contains(strings.Join(ev, "\n"), "Process 300 on MPS-shared card 0") ||
		!strings.Contains(strings.Join(ev, "\n"), "Process 400") || !strings.Contains(strings.Join(ev, "\n"), "in no pod of this node") {
		t.Errorf("events %q: want one for pid 300 (pod) and one for pid 400 (Node)", ev)
	}
	for _, e := range ev {
		if !strings.HasPrefix(e, "Warning "+ReasonForeignProcess) {
			t.Errorf("event %q: want a Warning %s", e, ReasonForeignProcess)
		}
	}
	g.Poll(context.Background())
	if ev := n.events(); len(ev) != 0 || len(n.deleted) != 0 {
		t.Errorf("third poll: events %q, deleted %v; want none", ev, n.deleted)
	}
	// The rogue process exits and a new one comes: reported anew.
	n.nvml.RemoveProcess(0, 300)
	n.nvml.RemoveProcess(0, 400)
	n.proc(301, 1, "uid-rogue")
	n.nvml.SetProcess(0, 301, 0)
	g.Poll(context.Background())
	g.Poll(context.Background())
	if ev := n.events(); len(ev) != 1 || !strings.Contains(ev[0], "Process 301") {
		t.Errorf("a new process: events %q", ev)
	}
}

// TestEvict: under evict the pod of a process that bypasses MPS is deleted
// once, counted and reported; a pod already being deleted is only
// reported; a failed deletion is tried again at the next poll.
func TestEvict(t *testing.T) {
	n := newNode(t)
	mpsCard0(n)
	n.pod("uid-rogue", "rogue", false)
	n.proc(310, 1, "uid-leaving")
	n.pod("uid-leaving", "leaving", true)
	n.nvml.SetProcess(0, 310, 0)
	n.failDel = errors.New("apiserver away")
	g := n.guard(PolicyEvict, true)
	for range 2 {
		g.Poll(context.Background())
	}
	if len(n.deleted) != 0 {
		t.Fatalf("deleted %v while deletes fail", n.deleted)
	}
	n.failDel = nil
	for range 3 {
		g.Poll(context.Background())
	}
	if diff := cmp.Diff([]string{"team/rogue"}, n.deleted); diff != "" {
		t.Errorf("deleted (-want +got):\n%s", diff)
	}
	_, evicted := n.obs.counts()
	if evicted[0] != 1 {
		t.Errorf("evictions counted %v, want 1 on card 0", evicted)
	}
	all := strings.Join(n.events(), "\n")
	for _, want := range []string{ReasonEvicted + " Process 300", ReasonForeignProcess + " Process 310", ReasonForeignProcess + " Process 400"} {
		if !strings.Contains(all, want) {
			t.Errorf("events lack %q:\n%s", want, all)
		}
	}
}

// TestNotMPS: on a node whose backend is not mps nothing is looked at, and
// a card whose NVML cannot list MPS processes (before Volta) is skipped
// rather than having all its clients taken for rogues.
func TestNotMPS(t *testing.T) {
	n := newNode(t)
	mpsCard0(n)
	n.pod("uid-rogue", "rogue", false)
	off := n.guard(PolicyEvict, false)
	for range 3 {
		off.Poll(context.Background())
	}
	foreign, _ := n.obs.counts()
	if ev := n.events(); len(ev) != 0 || len(n.deleted) != 0 || foreign[0] != 0 {
		t.Errorf("backend not mps: events %q, deleted %v, metric %v", ev, n.deleted, foreign)
	}
	dev, _ := n.nvml.DeviceGetHandleByIndex(0)
	dev.(*mock.Device).GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	on := n.guard(PolicyEvict, true)
	for range 3 {
		on.Poll(context.Background())
	}
	if ev := n.events(); len(ev) != 0 || len(n.deleted) != 0 {
		t.Errorf("MPS list not supported: events %q, deleted %v", ev, n.deleted)
	}
}

// TestRun: the loop reports and deletes while it runs, and stops with its
// context (run with -race: the loop, the observer and the recorder on
// other goroutines).
func TestRun(t *testing.T) {
	n := newNode(t)
	mpsCard0(n)
	n.pod("uid-rogue", "rogue", false)
	g := n.guard(PolicyEvict, true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, evicted := n.obs.counts(); evicted[0] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the loop deleted no pod")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
}

func TestParentPID(t *testing.T) {
	n := newNode(t)
	n.proc(7, 3, "")
	if got, err := parentPID(n.procRoot, 7); err != nil || got != 3 {
		t.Errorf("parentPID = %d, %v; want 3", got, err)
	}
	must(t, os.WriteFile(filepath.Join(n.procRoot, "7", "stat"), []byte("7 no paren"), 0o644))
	if _, err := parentPID(n.procRoot, 7); err == nil {
		t.Error("a stat without the command's parenthesis: no error")
	}
}

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]Policy{"": PolicyReport, "report": PolicyReport, "evict": PolicyEvict} {
		if got, err := ParsePolicy(in); err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParsePolicy("kill"); err == nil {
		t.Error(`ParsePolicy("kill"): no error`)
	}
}
