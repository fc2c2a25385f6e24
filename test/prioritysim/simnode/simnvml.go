package simnode

import (
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// SimNVML is NVML's per-process utilisation in simulated time: every
// Period it takes one sample per process that holds a context, stamped
// with the sample's time, whose SM utilisation is the share of the period
// the process had work on the card. GetProcessUtilization returns the
// samples newer than lastSeen up to the simulated now, as NVML does.
type SimNVML struct {
	Period time.Duration
	Epoch  time.Time // sample times are Epoch + k·Period

	mu    sync.Mutex
	now   time.Time
	procs map[uint32][]span // per PID, its busy spans (the last may be open)
	err   nvml.Return
}

type span struct{ from, to time.Time } // to zero: still busy

// NewSimNVML returns a card with no processes.
func NewSimNVML(period time.Duration, epoch time.Time) *SimNVML {
	return &SimNVML{Period: period, Epoch: epoch, now: epoch, procs: map[uint32][]span{}, err: nvml.SUCCESS}
}

// Advance moves simulated time to now.
func (n *SimNVML) Advance(now time.Time) { n.mu.Lock(); n.now = now; n.mu.Unlock() }

// AddProcess gives pid a context on the card (idle).
func (n *SimNVML) AddProcess(pid uint32) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.procs[pid]; !ok {
		n.procs[pid] = nil
	}
}

// SetBusy starts or ends a busy span of pid at the simulated now.
func (n *SimNVML) SetBusy(pid uint32, busy bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.procs[pid]
	open := len(s) > 0 && s[len(s)-1].to.IsZero()
	switch {
	case busy && !open:
		n.procs[pid] = append(s, span{from: n.now})
	case !busy && open:
		s[len(s)-1].to = n.now
	}
}

// SetError makes the queries fail with ret (nvml.SUCCESS clears it).
func (n *SimNVML) SetError(ret nvml.Return) { n.mu.Lock(); n.err = ret; n.mu.Unlock() }

// Device returns the card as an nvml.Device.
func (n *SimNVML) Device() nvml.Device {
	return &mock.Device{GetProcessUtilizationFunc: n.samples}
}

func (n *SimNVML) samples(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.err != nvml.SUCCESS {
		return nil, n.err
	}
	k := max(int64(0), (int64(lastSeen)-n.Epoch.UnixMicro())/n.Period.Microseconds())
	var out []nvml.ProcessUtilizationSample
	pids := make([]uint32, 0, len(n.procs))
	for pid := range n.procs {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	for ; ; k++ {
		at := n.Epoch.Add(time.Duration(k) * n.Period)
		if at.After(n.now) {
			break
		}
		if uint64(at.UnixMicro()) <= lastSeen || k == 0 {
			continue
		}
		for _, pid := range pids {
			out = append(out, nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: uint64(at.UnixMicro()),
				SmUtil: n.busyPercent(pid, at.Add(-n.Period), at)})
		}
	}
	if len(out) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return out, nvml.SUCCESS
}

// busyPercent is the share of (from, to] pid was busy, in percent.
func (n *SimNVML) busyPercent(pid uint32, from, to time.Time) uint32 {
	var busy time.Duration
	for _, s := range n.procs[pid] {
		end := s.to
		if end.IsZero() || end.After(to) {
			end = to
		}
		start := s.from
		if start.Before(from) {
			start = from
		}
		if end.After(start) {
			busy += end.Sub(start)
		}
	}
	return uint32(100 * busy / (to.Sub(from)))
}
