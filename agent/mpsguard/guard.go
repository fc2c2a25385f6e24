// Package mpsguard finds the processes on an MPS-shared card that are not
// clients of the card's MPS server, and reports them or has their pods
// deleted. A process that points CUDA_MPS_PIPE_DIRECTORY elsewhere (or
// reaches the card before its daemon is up) runs without MPS: NVIDIA's
// control daemon manual says such a program "continues to run as it
// normally would without MPS", so without the pinned-memory and thread
// limits, and on an EXCLUSIVE_PROCESS card the first one holds the whole
// card. NVML tells them apart: nvmlDeviceGetComputeRunningProcesses lists
// every process with a compute context on the card (the MPS server as C,
// clients as M+C), nvmlDeviceGetMPSComputeRunningProcesses only the MPS
// clients. What is in the first list, not in the second and not the
// card's server (a child of the card's control daemon, whose host PID
// agent/enforce/mpsd records) bypasses MPS. docs/backend-mps.md.
package mpsguard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
)

// Policy is what the agent does about a process that bypasses MPS
// (--mps-foreign-process-policy).
type Policy string

const (
	// PolicyReport records a Warning Event and the metric, nothing more.
	PolicyReport Policy = "report"
	// PolicyEvict also deletes the process's pod.
	PolicyEvict Policy = "evict"
)

// ParsePolicy reads --mps-foreign-process-policy; "" is report.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case "", PolicyReport:
		return PolicyReport, nil
	case PolicyEvict:
		return PolicyEvict, nil
	}
	return "", fmt.Errorf("--mps-foreign-process-policy %q: must be %s or %s", s, PolicyReport, PolicyEvict)
}

// Event reasons.
const (
	ReasonForeignProcess = "QGPUMPSForeignProcess"
	ReasonEvicted        = "QGPUMPSForeignProcessEvicted"
)

// CardID names a card in metrics and Events.
type CardID struct {
	Index int
	UUID  string
}

// Observer is told, per card and poll, how many processes bypass MPS, and
// each pod deleted for one (agent/metrics).
type Observer interface {
	ForeignProcesses(card CardID, n int)
	Evicted(card CardID)
}

// PodOf maps a host PID to the UID of its pod ("" for none): cgroup.Procs.
type PodOf interface {
	PodUID(pid uint32) (string, error)
}

// Config is what the guard needs.
type Config struct {
	Node string
	// Root is --mps-root: a card is MPS-shared while <Root>/<uuid>/ready
	// exists and <Root>/<uuid>/whole does not, and
	// <Root>/<uuid>/daemon.pid names its control daemon.
	Root    string
	Cards   []CardID
	Devices map[string]nvml.Device // by UUID
	// Active says whether the node's backend is mps now; the guard looks
	// at no card otherwise.
	Active func() bool
	Procs  PodOf
	// ProcRoot is the host's proc file system, for a process's parent.
	ProcRoot string
	Pods     func() ([]*v1.Pod, error)
	Policy   Policy
	// Delete deletes a pod (PolicyEvict); the agent deletes it with a
	// UID precondition, as the kubelet's evictions do.
	Delete   func(ctx context.Context, pod *v1.Pod) error
	Recorder record.EventRecorder
	Observer Observer
	// Poll is how often the cards are looked at (DefaultPoll if 0).
	Poll time.Duration
}

// DefaultPoll: a process is acted on after two polls that saw it (Confirm).
const DefaultPoll = 10 * time.Second

// Confirm is how many consecutive polls must see a process before it is
// reported: a client lists as a compute process as soon as it has a
// context, and as an MPS one once it is connected.
const Confirm = 2

// maxAncestry bounds the walk from a process up to the card's daemon.
const maxAncestry = 8

type key struct {
	uuid string
	pid  uint32
}

// Guard polls the cards (Run) or once (Poll). Not safe for concurrent use.
type Guard struct {
	cfg    Config
	seen   map[key]int  // consecutive polls that saw the process
	acted  map[key]bool // reported (and its pod deleted, if so)
	failed map[string]string
}

// New checks cfg and returns a guard.
func New(cfg Config) (*Guard, error) {
	if cfg.Root == "" || cfg.Active == nil || cfg.Procs == nil || cfg.Pods == nil || cfg.Recorder == nil || cfg.Observer == nil {
		return nil, errors.New("mpsguard: Root, Active, Procs, Pods, Recorder and Observer are required")
	}
	if cfg.Policy == PolicyEvict && cfg.Delete == nil {
		return nil, errors.New("mpsguard: PolicyEvict needs Delete")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	return &Guard{cfg: cfg, seen: map[key]int{}, acted: map[key]bool{}, failed: map[string]string{}}, nil
}

// Run polls until ctx ends.
func (g *Guard) Run(ctx context.Context) {
	t := time.NewTicker(g.cfg.Poll)
	defer t.Stop()
	for {
		g.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll looks at every card once.
func (g *Guard) Poll(ctx context.Context) {
	active := g.cfg.Active()
	var pods map[string]*v1.Pod
	for _, card := range g.cfg.Cards {
		if !active || !g.shared(card.UUID) {
			g.cfg.Observer.ForeignProcesses(card, 0)
			g.forget(card.UUID, nil)
			continue
		}
		pids, err := g.foreign(card.UUID)
		if err != nil {
			g.logFailure(ctx, card, err)
			continue
		}
		delete(g.failed, card.UUID)
		g.cfg.Observer.ForeignProcesses(card, len(pids))
		g.forget(card.UUID, pids)
		for _, pid := range pids {
			k := key{card.UUID, pid}
			g.seen[k]++
			if g.seen[k] < Confirm || g.acted[k] {
				continue
			}
			if pods == nil {
				pods = g.podsByUID(ctx)
			}
			g.acted[k] = g.act(ctx, card, pid, pods)
		}
	}
}

// shared: the card's daemon is ready and the card is not handed out whole.
func (g *Guard) shared(uuid string) bool {
	card := filepath.Join(g.cfg.Root, uuid)
	_, ready := os.Stat(filepath.Join(card, enforce.MPSReadyFile))
	_, whole := os.Stat(filepath.Join(card, enforce.MPSWholeFile))
	return ready == nil && whole != nil
}

// foreign lists the card's compute processes that are neither MPS clients
// nor the card's control daemon or one of its descendants (its servers).
func (g *Guard) foreign(uuid string) ([]uint32, error) {
	dev, ok := g.cfg.Devices[uuid]
	if !ok {
		return nil, fmt.Errorf("no NVML device for card %s", uuid)
	}
	compute, ret := dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("listing the compute processes: %s", ret.Error())
	}
	// Read after the compute list: a process that is a client then is one now.
	clients, ret := dev.GetMPSComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("listing the MPS processes (Volta or newer only): %s", ret.Error())
	}
	isClient := map[uint32]bool{}
	for _, p := range clients {
		isClient[p.Pid] = true
	}
	daemon := readPID(filepath.Join(g.cfg.Root, uuid, enforce.MPSDaemonPIDFile))
	var out []uint32
	for _, p := range compute {
		if isClient[p.Pid] || (daemon != 0 && g.descends(p.Pid, daemon)) || slices.Contains(out, p.Pid) {
			continue
		}
		out = append(out, p.Pid)
	}
	slices.Sort(out)
	return out, nil
}

// descends reports whether pid is ancestor or one of its descendants, by
// the parents in the host's proc file system.
func (g *Guard) descends(pid, ancestor uint32) bool {
	for range maxAncestry {
		if pid == ancestor {
			return true
		}
		if pid <= 1 {
			return false
		}
		parent, err := parentPID(g.cfg.ProcRoot, pid)
		if err != nil {
			return false
		}
		pid = parent
	}
	return false
}

// parentPID reads the PPid field of /proc/<pid>/stat, after the command's
// closing parenthesis (the command may hold spaces and parentheses).
func parentPID(procRoot string, pid uint32) (uint32, error) {
	raw, err := os.ReadFile(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "stat"))
	if err != nil {
		return 0, err
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat of pid %d: %q", pid, s)
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return 0, fmt.Errorf("stat of pid %d: %q", pid, s)
	}
	ppid, err := strconv.ParseUint(fields[1], 10, 32)
	return uint32(ppid), err
}

func readPID(path string) uint32 {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 32)
	if err != nil {
		return 0
	}
	return uint32(pid)
}

// forget drops the card's processes that are gone (all with nil).
func (g *Guard) forget(uuid string, now []uint32) {
	for k := range g.seen {
		if k.uuid == uuid && !slices.Contains(now, k.pid) {
			delete(g.seen, k)
			delete(g.acted, k)
		}
	}
}

func (g *Guard) logFailure(ctx context.Context, card CardID, err error) {
	if g.failed[card.UUID] != err.Error() {
		g.failed[card.UUID] = err.Error()
		klog.FromContext(ctx).Error(err, "Cannot tell processes that bypass MPS on the card; not looking at it this poll", "card", card.Index, "uuid", card.UUID)
	}
}

func (g *Guard) podsByUID(ctx context.Context) map[string]*v1.Pod {
	out := map[string]*v1.Pod{}
	list, err := g.cfg.Pods()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing the node's pods for processes that bypass MPS")
		return out
	}
	for _, p := range list {
		out[string(p.UID)] = p
	}
	return out
}

// act reports the process, on its pod or else the Node, and deletes the
// pod under PolicyEvict; false when the deletion failed (tried again at
// the next poll).
func (g *Guard) act(ctx context.Context, card CardID, pid uint32, pods map[string]*v1.Pod) bool {
	logger := klog.FromContext(ctx).WithValues("card", card.Index, "uuid", card.UUID, "pid", pid)
	msg := fmt.Sprintf("Process %d on MPS-shared card %d (%s) is not a client of the card's MPS server: it runs without the MPS limits, and on an EXCLUSIVE_PROCESS card it can hold the whole card (docs/backend-mps.md)", pid, card.Index, card.UUID)
	uid, err := g.cfg.Procs.PodUID(pid)
	if err != nil {
		logger.Info("Process bypasses MPS; its pod is unknown", "err", err)
	}
	pod := pods[uid]
	if pod == nil {
		logger.Info("Process bypasses MPS, in no pod of this node", "podUID", uid)
		ref := &v1.ObjectReference{Kind: "Node", Name: g.cfg.Node, UID: types.UID(g.cfg.Node)}
		g.cfg.Recorder.Event(ref, v1.EventTypeWarning, ReasonForeignProcess, msg+"; it is in no pod of this node, so nothing is deleted")
		return true
	}
	logger = logger.WithValues("pod", klog.KObj(pod))
	if g.cfg.Policy != PolicyEvict || pod.DeletionTimestamp != nil {
		logger.Info("Process bypasses MPS", "policy", g.cfg.Policy)
		g.cfg.Recorder.Event(pod, v1.EventTypeWarning, ReasonForeignProcess, msg)
		return true
	}
	if err := g.cfg.Delete(ctx, pod); err != nil {
		logger.Error(err, "Deleting the pod of a process that bypasses MPS; trying again at the next poll")
		return false
	}
	logger.Info("Deleted the pod of a process that bypasses MPS")
	g.cfg.Recorder.Event(pod, v1.EventTypeWarning, ReasonEvicted, msg+"; the pod is deleted (--mps-foreign-process-policy=evict)")
	g.cfg.Observer.Evicted(card)
	return true
}
