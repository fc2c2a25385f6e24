package nvml

import (
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// SetProcess puts process pid on card index with the given SM utilisation
// (percent; 0 is a process that holds a context but runs nothing). Tests
// script an online process turning busy and idle with it.
func (f *Fake) SetProcess(index int, pid uint32, smUtil uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.procs[index] == nil {
		f.procs[index] = map[uint32]uint32{}
	}
	f.procs[index][pid] = smUtil
}

// RemoveProcess takes pid off card index (the process exited).
func (f *Fake) RemoveProcess(index int, pid uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.procs[index], pid)
	delete(f.mpsClients[index], pid)
}

// SetMPSClient makes process pid on card index a client of the card's MPS
// server (or no longer one): NVML then lists it among the card's MPS
// compute processes as well as its compute processes, as nvidia-smi shows
// a client as M+C.
func (f *Fake) SetMPSClient(index int, pid uint32, client bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mpsClients[index] == nil {
		f.mpsClients[index] = map[uint32]bool{}
	}
	if client {
		f.mpsClients[index][pid] = true
	} else {
		delete(f.mpsClients[index], pid)
	}
}

// SetProcessError makes the process queries of card index fail with ret
// (nvml.SUCCESS clears it).
func (f *Fake) SetProcessError(index int, ret nvml.Return) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procErr[index] = ret
}

// processUtilization answers as NVML does: one sample per process with a
// timestamp (µs since the epoch) after since, or ERROR_NOT_FOUND when there
// is none. The fake samples at every call, so each sample is "now".
func (f *Fake) processUtilization(index int, since uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ret, ok := f.procErr[index]; ok && ret != nvml.SUCCESS {
		return nil, ret
	}
	now := uint64(time.Now().UnixMicro())
	if now <= since {
		now = since + 1
	}
	var out []nvml.ProcessUtilizationSample
	for _, pid := range f.sortedPIDs(index) {
		out = append(out, nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: now, SmUtil: f.procs[index][pid]})
	}
	if len(out) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return out, nvml.SUCCESS
}

func (f *Fake) runningProcesses(index int) ([]nvml.ProcessInfo, nvml.Return) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ret, ok := f.procErr[index]; ok && ret != nvml.SUCCESS {
		return nil, ret
	}
	var out []nvml.ProcessInfo
	for _, pid := range f.sortedPIDs(index) {
		out = append(out, nvml.ProcessInfo{Pid: pid})
	}
	return out, nvml.SUCCESS
}

func (f *Fake) sortedPIDs(index int) []uint32 {
	var pids []uint32
	for pid := range f.procs[index] {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}

// mpsProcesses answers nvmlDeviceGetMPSComputeRunningProcesses: the card's
// processes marked as MPS clients.
func (f *Fake) mpsProcesses(index int) ([]nvml.ProcessInfo, nvml.Return) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ret, ok := f.procErr[index]; ok && ret != nvml.SUCCESS {
		return nil, ret
	}
	var out []nvml.ProcessInfo
	for _, pid := range f.sortedPIDs(index) {
		if f.mpsClients[index][pid] {
			out = append(out, nvml.ProcessInfo{Pid: pid})
		}
	}
	return out, nvml.SUCCESS
}
