package priority

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Pods of the simulated node: on card 0 one online and two offline pods, on
// card 1 a general pod that is always busy and must never be touched.
const (
	SimOnline    = "11111111-1111-1111-1111-111111111111"
	SimOffline1  = "22222222-2222-2222-2222-222222222222"
	SimOffline2  = "33333333-3333-3333-3333-333333333333"
	SimGeneral   = "44444444-4444-4444-4444-444444444444"
	simOnlinePID = 100
)

// Sim is a simulated node: a fake cgroup tree and /proc (cgroup.FakeTree), a
// fake NVML whose per-process utilisation the caller scripts, and the grants
// the controller reads.
type Sim struct {
	Tree *cgroup.FakeTree
	NVML *nvml.Fake
	Dirs map[string]string // pod UID → cgroup dir

	mu      sync.Mutex
	grants  []store.Grant
	general []byte // the general pod's freeze file as created
}

// NewSim builds the node under dir.
func NewSim(dir string, v cgroup.Version, systemd bool) (*Sim, error) {
	tree, err := cgroup.NewFakeTree(dir, v, systemd)
	if err != nil {
		return nil, err
	}
	cards, _ := nvml.ParseFakeSpec("2xT4")
	s := &Sim{Tree: tree, NVML: nvml.NewFake(cards, "sim", ""), Dirs: map[string]string{}}
	pods := []struct {
		uid, qos string
		pid      uint32
		card     int
		class    protocol.Class
		resource string
		cores    int64
	}{
		{SimOnline, "burstable", simOnlinePID, 0, protocol.ClassOnline, protocol.ResourceMemory, 0},
		{SimOffline1, "besteffort", 200, 0, protocol.ClassOffline, protocol.ResourceCoreGreedy, 60},
		{SimOffline2, "burstable", 201, 0, protocol.ClassOffline, protocol.ResourceCoreGreedy, 40},
		{SimGeneral, "", 300, 1, protocol.ClassGeneral, protocol.ResourceCore, 50},
	}
	for _, p := range pods {
		if s.Dirs[p.uid], err = tree.AddPod(p.qos, p.uid); err != nil {
			return nil, err
		}
		if err := tree.AddProc(p.pid, p.qos, p.uid); err != nil {
			return nil, err
		}
		// Offline and general processes compute flat out; the online one starts idle.
		s.NVML.SetProcess(p.card, p.pid, map[bool]uint32{true: 0, false: 95}[p.class == protocol.ClassOnline])
		slice := protocol.Slice{Index: p.card, UUID: s.NVML.UUID(p.card), MemoryGiB: 2, Cores: p.cores}
		s.grants = append(s.grants, store.Grant{PodUID: p.uid, Namespace: "default", Name: "pod-" + p.uid[:4],
			Container: "c", Resource: p.resource, Class: p.class, Slices: []protocol.Slice{slice}})
	}
	s.general, err = os.ReadFile(s.freezeFile(SimGeneral))
	return s, err
}

func (s *Sim) freezeFile(uid string) string {
	if s.Tree.Version == cgroup.V1 {
		return filepath.Join(s.Dirs[uid], "freezer.state")
	}
	return filepath.Join(s.Dirs[uid], "cgroup.freeze")
}

// generalWritten reports whether anything wrote the general pod's freeze file.
func (s *Sim) generalWritten() bool {
	data, err := os.ReadFile(s.freezeFile(SimGeneral))
	return err != nil || string(data) != string(s.general)
}

// Grants is Config.Grants for the simulated node.
func (s *Sim) Grants() ([]store.Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.grants), nil
}

// DropPod removes a pod's grants (the pod was deleted).
func (s *Sim) DropPod(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.grants = slices.DeleteFunc(s.grants, func(g store.Grant) bool { return g.PodUID == uid })
}

// SetOnlineBusy scripts the online process: busy (SM 90%) or idle (0%).
func (s *Sim) SetOnlineBusy(busy bool) {
	s.NVML.SetProcess(0, simOnlinePID, map[bool]uint32{true: 90, false: 0}[busy])
}

// Config returns a controller configuration for the simulated node.
func (s *Sim) Config(poll, idle time.Duration) (Config, error) {
	f, err := cgroup.Detect(s.Tree.CgroupRoot)
	if err != nil {
		return Config{}, err
	}
	devs, err := DevicesByUUID(s.NVML)
	if err != nil {
		return Config{}, err
	}
	return Config{Poll: poll, Idle: idle, Grants: s.Grants, Devices: devs, Freezer: f,
		Procs: cgroup.Procs{Root: s.Tree.ProcRoot}}, nil
}

// Frozen reads the freeze file of a pod of the simulated node.
func (s *Sim) Frozen(uid string) bool {
	f := &cgroup.Freezer{Root: s.Tree.CgroupRoot, Version: s.Tree.Version}
	frozen, _ := f.Frozen(s.Dirs[uid])
	return frozen
}

// WaitFrozen polls the offline pods' freeze files every 100µs until both read
// want, and returns when that was first seen.
func (s *Sim) WaitFrozen(ctx context.Context, want bool, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		now := time.Now()
		if s.Frozen(SimOffline1) == want && s.Frozen(SimOffline2) == want {
			return now, nil
		}
		if now.After(deadline) || ctx.Err() != nil {
			return now, fmt.Errorf("offline pods not frozen=%v after %s", want, timeout)
		}
		time.Sleep(100 * time.Microsecond)
	}
}
