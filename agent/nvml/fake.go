package nvml

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/qgpu-scheduler/qgpu/agent/nvml/fakespec"
)

// Fake is a simulated NVML built from go-nvml's mock package, so that the same
// discovery and health code runs on machines without GPUs. Tests (and the
// --fake-health-file of the agent) flip a card's health; InjectXid delivers an
// NVML Xid event as a driver would.
type Fake struct {
	mock.Interface

	mu         sync.Mutex
	devices    []*mock.Device
	uuids      []string
	lost       map[int]bool
	healthFile string
	events     chan nvml.EventData
	procs      map[int]map[uint32]uint32 // card index → pid → SM utilisation
	mpsClients map[int]map[uint32]bool   // card index → pids with an MPS context
	procErr    map[int]nvml.Return
	mig        map[int][2]int // card index → current, pending MIG mode
	waitErrs   chan nvml.Return
}

var _ nvml.Interface = (*Fake)(nil)

// NewFake returns a simulated NVML with the given cards. seed (the node name)
// makes the UUIDs stable across agent restarts and distinct between nodes.
// healthFile, if not empty, names a file listing unhealthy cards (one index or
// UUID per line); the file may be absent, which means all cards are healthy.
func NewFake(cards []FakeCard, seed, healthFile string) *Fake {
	f := &Fake{lost: map[int]bool{}, healthFile: healthFile, events: make(chan nvml.EventData, 64),
		procs: map[int]map[uint32]uint32{}, mpsClients: map[int]map[uint32]bool{}, procErr: map[int]nvml.Return{}, mig: map[int][2]int{},
		waitErrs: make(chan nvml.Return, 8)}
	for i, c := range cards {
		f.uuids = append(f.uuids, fakespec.UUID(seed, i))
		f.devices = append(f.devices, f.newDevice(i, c))
	}
	f.InitFunc = func() nvml.Return { return nvml.SUCCESS }
	f.ShutdownFunc = func() nvml.Return { return nvml.SUCCESS }
	f.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return fakespec.DriverVersion, nvml.SUCCESS }
	f.DeviceGetCountFunc = func() (int, nvml.Return) { return len(f.devices), nvml.SUCCESS }
	f.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(f.devices) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return f.devices[i], nvml.SUCCESS
	}
	// What the CDI spec generator (agent/cardspec, NVIDIA's nvcdi) asks
	// besides discovery: every symbol is there, cards by UUID.
	f.ExtensionsFunc = func() nvml.ExtendedInterface {
		return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
	}
	f.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		if i := slices.Index(f.uuids, uuid); i >= 0 {
			return f.devices[i], nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	f.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: f.wait,
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	return f
}

func (f *Fake) newDevice(index int, c FakeCard) *mock.Device {
	d := &mock.Device{}
	d.GetIndexFunc = func() (int, nvml.Return) { return index, nvml.SUCCESS }
	// Fake card N is /dev/nvidiaN (under the agent's --device-root).
	d.GetMinorNumberFunc = func() (int, nvml.Return) { return index, nvml.SUCCESS }
	d.GetUUIDFunc = func() (string, nvml.Return) { return f.uuids[index], nvml.SUCCESS }
	d.GetNameFunc = func() (string, nvml.Return) { return c.Model, nvml.SUCCESS }
	sized := false
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		// The first call (discovery) always answers: the fake simulates a card
		// that breaks after the agent has sized it, so that an agent restarted
		// with a broken card still starts, then reports the card unhealthy.
		f.mu.Lock()
		first := !sized
		sized = true
		f.mu.Unlock()
		if !first && f.isLost(index) {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		total := uint64(c.MemoryMiB) << 20
		return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError, nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	d.GetProcessUtilizationFunc = func(since uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return f.processUtilization(index, since)
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return f.runningProcesses(index) }
	d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return f.mpsProcesses(index) }
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		m := f.mig[index]
		return m[0], m[1], nvml.SUCCESS
	}
	cdiQueries(d, index)
	return d
}

// SetMIG sets card index's current and pending MIG mode
// (nvml.DEVICE_MIG_ENABLE or nvml.DEVICE_MIG_DISABLE, the default).
func (f *Fake) SetMIG(index, current, pending int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mig[index] = [2]int{current, pending}
}

// InjectEventWaitError makes the next wait for NVML events fail with ret,
// as a driver in trouble would.
func (f *Fake) InjectEventWaitError(ret nvml.Return) {
	f.waitErrs <- ret
}

// UUID returns the UUID of card index.
func (f *Fake) UUID(index int) string { return f.uuids[index] }

// SetHealthy makes the health query of card index fail (false) or succeed (true).
func (f *Fake) SetHealthy(index int, healthy bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lost[index] = !healthy
}

// InjectXid delivers an Xid critical error event for card index.
func (f *Fake) InjectXid(index int, xid uint64) {
	f.events <- nvml.EventData{Device: f.devices[index], EventType: nvml.EventTypeXidCriticalError, EventData: xid}
}

func (f *Fake) isLost(index int) bool {
	f.mu.Lock()
	lost := f.lost[index]
	f.mu.Unlock()
	return lost || f.listedInHealthFile(index)
}

func (f *Fake) listedInHealthFile(index int) bool {
	if f.healthFile == "" {
		return false
	}
	data, err := os.ReadFile(f.healthFile)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == strconv.Itoa(index) || line == f.uuids[index] {
			return true
		}
	}
	return false
}

func (f *Fake) wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
	defer t.Stop()
	select {
	case ret := <-f.waitErrs:
		return nvml.EventData{}, ret
	case e := <-f.events:
		return e, nvml.SUCCESS
	case <-t.C:
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
}

// cdiQueries answers what the CDI spec generator (agent/cardspec) asks a
// card besides discovery: not MIG-capable, a PCI bus ID per index, no
// NVLink-C2C (not coherent).
func cdiQueries(d *mock.Device, index int) {
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		info := nvml.PciInfo{Bus: uint32(index + 1)}
		id := fmt.Sprintf("00000000:%02x:00.0", index+1)
		copy(info.BusId[:], id)
		copy(info.BusIdLegacy[:], id[4:])
		return info, nvml.SUCCESS
	}
}
