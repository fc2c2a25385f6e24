// Package simnode is a simulated node for the online/offline priority
// controller (agent/priority), in simulated time: a fake cgroup tree and
// /proc, NVML per card (SimNVML), the pod objects and the grants. Only the
// controller's tests and its simulator (test/prioritysim,
// cmd/qgpu-priority-sim) use it; the agent does not link it.
package simnode

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Pods of the simulated node: on card 0 one online and two offline pods
// (each offline pod has a GPU container "c" and a sidecar without a grant),
// on card 1 a general pod that is always busy and must never be touched.
const (
	SimOnline   = "11111111-1111-1111-1111-111111111111"
	SimOffline1 = "22222222-2222-2222-2222-222222222222"
	SimOffline2 = "33333333-3333-3333-3333-333333333333"
	SimGeneral  = "44444444-4444-4444-4444-444444444444"
	OnlinePID   = 100
	Card0       = "GPU-sim-0"
	Card1       = "GPU-sim-1"
)

// simPod is one pod of the simulated node.
type simPod struct {
	uid, qos string
	pid      uint32
	card     int
	class    protocol.Class
	resource string
	cores    int64
}

var simPods = []simPod{
	{SimOnline, "burstable", OnlinePID, 0, protocol.ClassOnline, protocol.ResourceMemory, 0},
	{SimOffline1, "besteffort", 200, 0, protocol.ClassOffline, protocol.ResourceCoreGreedy, 60},
	{SimOffline2, "burstable", 201, 0, protocol.ClassOffline, protocol.ResourceCoreGreedy, 40},
	{SimGeneral, "", 300, 1, protocol.ClassGeneral, protocol.ResourceCore, 50},
}

// Sim is a simulated node in simulated time: a fake cgroup tree and /proc
// (cgroup.FakeTree) with a cgroup per container, NVML per card sampling
// every NVMLPeriod (SimNVML), the pod objects and the grants the
// controller reads. Nothing in it reads the wall clock.
type Sim struct {
	Tree  *cgroup.FakeTree
	Cards [2]*SimNVML
	Dirs  map[string]string // pod UID → pod cgroup dir
	// GPU and Sidecar: container cgroup dirs of the offline pods, by pod UID.
	GPU, Sidecar map[string]string
	Now          time.Time

	mu      sync.Mutex
	grants  []store.Grant
	pods    map[string]*v1.Pod
	general []byte // the general pod's freeze file as created
}

// NewSim builds the node under dir; NVML samples every nvmlPeriod.
func NewSim(dir string, v cgroup.Version, systemd bool, nvmlPeriod time.Duration) (*Sim, error) {
	tree, err := cgroup.NewFakeTree(dir, v, systemd)
	if err != nil {
		return nil, err
	}
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &Sim{Tree: tree, Dirs: map[string]string{}, GPU: map[string]string{}, Sidecar: map[string]string{},
		pods: map[string]*v1.Pod{}, Now: epoch}
	s.Cards[0], s.Cards[1] = NewSimNVML(nvmlPeriod, epoch), NewSimNVML(nvmlPeriod, epoch)
	for _, p := range simPods {
		if err := s.addPod(p); err != nil {
			return nil, err
		}
	}
	s.Cards[1].SetBusy(300, true) // the general pod computes flat out
	s.general, err = os.ReadFile(s.freezeFile(s.Dirs[SimGeneral]))
	return s, err
}

func (s *Sim) addPod(p simPod) error {
	var err error
	if s.Dirs[p.uid], err = s.Tree.AddPod(p.qos, p.uid); err != nil {
		return err
	}
	if err := s.Tree.AddProc(p.pid, p.qos, p.uid); err != nil {
		return err
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(p.uid), Namespace: "default", Name: "pod-" + p.uid[:4]}}
	for _, ctr := range []string{"c", "sidecar"} {
		id := fmt.Sprintf("%s%s", ctr, p.uid[:8])
		dir, err := s.Tree.AddContainer(p.qos, p.uid, id)
		if err != nil {
			return err
		}
		if ctr == "c" {
			s.GPU[p.uid] = dir
		} else {
			s.Sidecar[p.uid] = dir
		}
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: ctr})
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, v1.ContainerStatus{Name: ctr, ContainerID: "containerd://" + id})
	}
	s.pods[p.uid] = pod
	s.Cards[p.card].AddProcess(p.pid)
	uuid := []string{Card0, Card1}[p.card]
	slice := protocol.Slice{Index: p.card, UUID: uuid, MemoryGiB: 2, Cores: p.cores}
	s.grants = append(s.grants, store.Grant{PodUID: p.uid, Namespace: "default", Name: pod.Name,
		Container: "c", Resource: p.resource, Class: p.class, Slices: []protocol.Slice{slice}})
	return nil
}

func (s *Sim) freezeFile(dir string) string {
	if s.Tree.Version == cgroup.V1 {
		return filepath.Join(dir, "freezer.state")
	}
	return filepath.Join(dir, "cgroup.freeze")
}

// GeneralTouched reports whether anything wrote the general pod's freeze file.
func (s *Sim) GeneralTouched() bool {
	data, err := os.ReadFile(s.freezeFile(s.Dirs[SimGeneral]))
	return err != nil || string(data) != string(s.general) || s.frozenDir(s.GPU[SimGeneral])
}

// Grants is Config.Grants for the simulated node.
func (s *Sim) Grants() ([]store.Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.grants), nil
}

// Pods is Config.Pods for the simulated node.
func (s *Sim) Pods() ([]*v1.Pod, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*v1.Pod
	for _, p := range s.pods {
		out = append(out, p.DeepCopy())
	}
	return out, nil
}

// DropPod removes a pod's grants and object (the pod was deleted).
func (s *Sim) DropPod(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.grants = slices.DeleteFunc(s.grants, func(g store.Grant) bool { return g.PodUID == uid })
	delete(s.pods, uid)
}

// MarkDeleting sets the pod's deletion timestamp (kubectl delete, before
// the kubelet kills it).
func (s *Sim) MarkDeleting(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := metav1.NewTime(s.Now)
	s.pods[uid].DeletionTimestamp = &now
}

// SetLiveness gives the offline pod's GPU container a liveness probe.
func (s *Sim) SetLiveness(uid string, period, timeout, threshold int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods[uid].Spec.Containers[0].LivenessProbe = &v1.Probe{PeriodSeconds: period, TimeoutSeconds: timeout, FailureThreshold: threshold}
}

// SetOnlineBusy starts or ends the online process's work at the simulated now.
func (s *Sim) SetOnlineBusy(busy bool) { s.Cards[0].SetBusy(OnlinePID, busy) }

// Advance moves simulated time by d.
func (s *Sim) Advance(d time.Duration) time.Time {
	s.Now = s.Now.Add(d)
	s.Cards[0].Advance(s.Now)
	s.Cards[1].Advance(s.Now)
	return s.Now
}

// Node is what a controller reads of the simulated node: the fields of
// its configuration (agent/priority.Config) other than timing.
type Node struct {
	Grants   func() ([]store.Grant, error)
	Pods     func() ([]*v1.Pod, error)
	Devices  map[string]nvml.Device
	Freezer  *cgroup.Freezer
	Procs    cgroup.Procs
	ProcRoot string
}

// Node returns what a controller reads of the simulated node.
func (s *Sim) Node() (Node, error) {
	f, err := cgroup.Detect(s.Tree.CgroupRoot)
	if err != nil {
		return Node{}, err
	}
	devs := map[string]nvml.Device{Card0: s.Cards[0].Device(), Card1: s.Cards[1].Device()}
	return Node{Grants: s.Grants, Pods: s.Pods, Devices: devs, Freezer: f,
		Procs: cgroup.Procs{Root: s.Tree.ProcRoot}, ProcRoot: s.Tree.ProcRoot}, nil
}

// Frozen reports whether the offline pod's GPU container reads frozen.
func (s *Sim) Frozen(uid string) bool { return s.frozenDir(s.GPU[uid]) }

// SidecarFrozen reports whether anything froze the pod's sidecar or the pod's own cgroup.
func (s *Sim) SidecarFrozen(uid string) bool {
	return s.frozenDir(s.Sidecar[uid]) || s.frozenDir(s.Dirs[uid])
}

func (s *Sim) frozenDir(dir string) bool {
	f := &cgroup.Freezer{Root: s.Tree.CgroupRoot, Version: s.Tree.Version}
	frozen, _ := f.Frozen(dir)
	return frozen
}

// EnableRegions writes a HAMi-core region for the GPU container of the
// online and offline pods under root (as the library does at cuInit: the
// online one throttled, so it records launches; the offline ones with an
// SM limit, so a block holds) and returns root for Config.RegionRoot.
func (s *Sim) EnableRegions(root string) (map[string]string, error) {
	paths := map[string]string{}
	for _, p := range simPods[:3] {
		dir, err := hamiregion.PrepareContainerDir(root, p.uid, "c")
		if err != nil {
			return nil, err
		}
		im := hamiregion.Image{UUIDs: []string{Card0}, SMLimit: []uint64{uint64(max(p.cores, 50))},
			Procs: []hamiregion.Proc{{PID: 1, HostPID: int32(p.pid), Status: 1}}}
		if p.class == protocol.ClassOnline {
			im.UtilizationSwitch = 1
		}
		paths[p.uid] = filepath.Join(dir, hamiregion.FileName)
		if err := im.WriteFile(paths[p.uid]); err != nil {
			return nil, err
		}
	}
	return paths, nil
}
