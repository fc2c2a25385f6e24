package hamiregion

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"syscall"
)

var le = binary.LittleEndian

// Proc is one process slot of a region.
type Proc struct {
	PID     int32 // in the container's PID namespace
	HostPID int32 // 0 until the library (or a monitor) learned it
	Status  int32
	// By CUDA ordinal: the bytes the process holds on the card (the
	// library's used[].total: contexts, modules, allocations) and its SM
	// utilisation in percent (device_util[].sm_util, which the library's
	// utilisation watcher fills from NVML).
	MemoryUsed [MaxDevices]uint64
	SMUtil     [MaxDevices]uint64
}

// CardUsage is what a container's processes use of one card.
type CardUsage struct {
	UUID       string
	MemoryUsed uint64 // bytes
	SMUtil     uint64 // percent of the card's SMs, summed over the processes
}

// Usage sums the process slots by card, in the order of UUIDs (the
// container's CUDA ordinals), as HAMi's monitor does.
func (s Snapshot) Usage() []CardUsage {
	out := make([]CardUsage, len(s.UUIDs))
	for i, u := range s.UUIDs {
		out[i].UUID = u
		for _, p := range s.Procs {
			out[i].MemoryUsed += p.MemoryUsed[i]
			out[i].SMUtil += p.SMUtil[i]
		}
	}
	return out
}

// Snapshot is what a region said when it was read.
type Snapshot struct {
	Version Version
	// UUIDs of the container's cards, by CUDA ordinal inside the container.
	UUIDs []string
	// SMLimit by CUDA ordinal (percent; 0 or ≥ 100: no rate limiter, so
	// the library neither records launches nor honours a block).
	SMLimit           []uint64
	Procs             []Proc
	UtilizationSwitch int32
	RecentKernel      int32
	Priority          int32
	LastKernelTime    int64 // seconds since the epoch; 0 when never written
}

// Parse reads a whole region held in memory (a test's bytes, a fuzzer's input).
func Parse(data []byte) (Snapshot, error) {
	return read(bytes.NewReader(data), int64(len(data)))
}

// read takes only the fields it needs: the header, the tail and the used
// process slots, not the 2 MB of the whole region.
func read(r io.ReaderAt, size int64) (Snapshot, error) {
	var s Snapshot
	if size < offProcs {
		return s, fmt.Errorf("%w: %d bytes, want %d", ErrSize, size, FileSize)
	}
	head := make([]byte, offProcs)
	if _, err := r.ReadAt(head, 0); err != nil {
		return s, fmt.Errorf("hami region: reading the header: %w", err)
	}
	if err := checkHeader(head); err != nil {
		return s, err
	}
	s.Version = Version{le.Uint32(head[offMajor:]), le.Uint32(head[offMinor:])}
	if size != FileSize {
		return s, fmt.Errorf("%w: %d bytes, want exactly %d for layout %s", ErrSize, size, FileSize, s.Version)
	}
	// The library writes device_num once it has asked NVML (init_device_info);
	// 0 (not yet) or more than its arrays hold is not a region to act on.
	n := le.Uint64(head[offDeviceNum:])
	if n == 0 || n > MaxDevices {
		return s, fmt.Errorf("%w: device_num %d not in [1, %d]", ErrCorrupt, n, MaxDevices)
	}
	for i := range int(n) {
		raw := head[offUUIDs+i*uuidLen : offUUIDs+(i+1)*uuidLen]
		if j := bytes.IndexByte(raw, 0); j >= 0 {
			raw = raw[:j]
		}
		s.UUIDs = append(s.UUIDs, string(raw))
		s.SMLimit = append(s.SMLimit, le.Uint64(head[offSMLimit+i*8:]))
	}
	tail := make([]byte, Size-offProcNum)
	if _, err := r.ReadAt(tail, offProcNum); err != nil {
		return s, fmt.Errorf("hami region: reading the switches: %w", err)
	}
	procNum := int32(le.Uint32(tail))
	if procNum < 0 || procNum > MaxProcs {
		return s, fmt.Errorf("%w: proc_num %d not in [0, %d]", ErrCorrupt, procNum, MaxProcs)
	}
	s.UtilizationSwitch = int32(le.Uint32(tail[offUtilSwitch-offProcNum:]))
	s.RecentKernel = int32(le.Uint32(tail[offRecent-offProcNum:]))
	s.Priority = int32(le.Uint32(tail[offPriority-offProcNum:]))
	s.LastKernelTime = int64(le.Uint64(tail[offLastKernel-offProcNum:]))
	slot := make([]byte, slotStatus+4)
	for i := range int(procNum) {
		if _, err := r.ReadAt(slot, int64(offProcs+i*procSlotSize)); err != nil {
			return s, fmt.Errorf("hami region: reading process slot %d: %w", i, err)
		}
		p := Proc{PID: int32(le.Uint32(slot[slotPID:])),
			HostPID: int32(le.Uint32(slot[slotHostPID:])), Status: int32(le.Uint32(slot[slotStatus:]))}
		for d := range int(n) {
			p.MemoryUsed[d] = le.Uint64(slot[slotUsed+d*memSize+memTotal:])
			p.SMUtil[d] = le.Uint64(slot[slotSMUtil+d*utilSize+utilSM:])
		}
		s.Procs = append(s.Procs, p)
	}
	return s, nil
}

func checkHeader(head []byte) error {
	if m := le.Uint32(head[offMagic:]); m != Magic {
		return fmt.Errorf("%w: %d", ErrMagic, m)
	}
	v := Version{le.Uint32(head[offMajor:]), le.Uint32(head[offMinor:])}
	if !known(v) {
		return fmt.Errorf("%w %s (known: %v)", ErrUnknownLayout, v, Known)
	}
	return nil
}

// CanThrottle reports whether the library runs its rate limiter for the
// container, the one place it records launches (recent_kernel) and honours
// a block: an SM limit in (0, 100) on some card and the switch on.
func (s Snapshot) CanThrottle() bool {
	return s.UtilizationSwitch != 0 && s.HasSMLimit()
}

// HasSMLimit reports whether some card of the container has an SM limit in
// (0, 100): only then does the library run its rate limiter at all, so only
// then can turning the switch on block the container's launches.
func (s Snapshot) HasSMLimit() bool {
	for _, l := range s.SMLimit {
		if l > 0 && l < 100 {
			return true
		}
	}
	return false
}

// Alive reports whether any process of the region is still running, by
// host PID; alive answers for one host PID. A slot whose host PID is not
// known yet (0) counts as alive: the library registers the process first.
func (s Snapshot) Alive(alive func(hostPID int32) bool) bool {
	for _, p := range s.Procs {
		if p.PID == 0 {
			continue
		}
		if p.HostPID == 0 || alive(p.HostPID) {
			return true
		}
	}
	return false
}

// HostPIDsKnown reports whether every process slot in use has its host PID.
// HAMi-core runs a process's rate limiter, the one place it records
// launches and honours a block, only once that process found its host PID
// (utilization_watcher loops until pidfound; until then the cached switch
// stays 0 and rate_limiter returns at once): a process without one
// launches unrecorded and unblocked, whatever the region says.
func (s Snapshot) HostPIDsKnown() bool {
	for _, p := range s.Procs {
		if p.PID != 0 && p.HostPID == 0 {
			return false
		}
	}
	return true
}

// File is a region file on disk, read and written with pread/pwrite: a
// container can truncate its own region file at any time, and a mapping
// of a truncated file would crash the agent with SIGBUS.
type File struct {
	Path string
	f    *os.File
}

// Open opens path for reading and writing and checks its layout. The file
// lies in a directory the container can write: a symbolic link there (to
// another container's region, or to a host file) is refused rather than
// followed in the agent's view of the host, and so is anything but a
// regular file.
func Open(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("hami region: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("hami region: %s is not a regular file", path)
	}
	rf := &File{Path: path, f: f}
	if _, err := rf.Read(); err != nil {
		f.Close()
		return nil, err
	}
	return rf, nil
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// ReadFile opens the region at path as Open does, reads it once and closes it.
func ReadFile(path string) (Snapshot, error) {
	f, err := Open(path)
	if err != nil {
		return Snapshot{}, err
	}
	defer f.Close()
	return f.Read()
}

// Read reads the region again (its layout is checked every time: the
// container may have replaced the file).
func (f *File) Read() (Snapshot, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return Snapshot{}, fmt.Errorf("hami region: %w", err)
	}
	s, err := read(f.f, fi.Size())
	if err != nil {
		return s, fmt.Errorf("%s: %w", f.Path, err)
	}
	return s, nil
}

// SetRecentKernel writes recent_kernel. The library and this writer both
// store plain 32-bit values (as HAMi's monitor does): a launch recorded
// between a Read and this write is lost, which at worst ends an online
// container's activity one poll early.
func (f *File) SetRecentKernel(v int32) error { return f.writeInt32(offRecent, v) }

// SetUtilizationSwitch writes utilization_switch (1: the rate limiter runs,
// so launches are recorded and a block is honoured; 0: it does not).
func (f *File) SetUtilizationSwitch(v int32) error { return f.writeInt32(offUtilSwitch, v) }

func (f *File) writeInt32(off int64, v int32) error {
	head := make([]byte, offMinor+4)
	if _, err := f.f.ReadAt(head, 0); err != nil {
		return fmt.Errorf("hami region %s: %w", f.Path, err)
	}
	// Never write into a file whose layout changed under us.
	if err := checkHeader(head); err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	if fi, err := f.f.Stat(); err != nil || fi.Size() != FileSize {
		return fmt.Errorf("%s: %w", f.Path, ErrSize)
	}
	var b [4]byte
	le.PutUint32(b[:], uint32(v))
	if _, err := f.f.WriteAt(b[:], off); err != nil {
		return fmt.Errorf("hami region %s: %w", f.Path, err)
	}
	return nil
}
