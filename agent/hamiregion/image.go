package hamiregion

import (
	"fmt"
	"os"
)

// Image is a region as HAMi-core lays it out, for tests and the priority
// simulator: they write the files the library would write.
type Image struct {
	Version           Version // zero: 1.2
	UUIDs             []string
	SMLimit           []uint64 // by card; missing entries are 0
	Procs             []Proc
	UtilizationSwitch int32
	RecentKernel      int32
	Priority          int32
	LastKernelTime    int64
}

// Bytes returns the region's bytes. It does not validate: tests use it to
// write regions the reader must refuse.
func (im Image) Bytes() []byte {
	v := im.Version
	if v == (Version{}) {
		v = Version{1, 2}
	}
	b := make([]byte, FileSize) // as the library writes it: one byte past the struct
	le.PutUint32(b[offMagic:], Magic)
	le.PutUint32(b[offMajor:], v.Major)
	le.PutUint32(b[offMinor:], v.Minor)
	le.PutUint64(b[offDeviceNum:], uint64(len(im.UUIDs)))
	for i, u := range im.UUIDs {
		copy(b[offUUIDs+i*uuidLen:offUUIDs+(i+1)*uuidLen-1], u)
	}
	for i, l := range im.SMLimit {
		le.PutUint64(b[offSMLimit+i*8:], l)
	}
	for i, p := range im.Procs {
		s := b[offProcs+i*procSlotSize:]
		le.PutUint32(s[slotPID:], uint32(p.PID))
		le.PutUint32(s[slotHostPID:], uint32(p.HostPID))
		le.PutUint32(s[slotStatus:], uint32(p.Status))
		for d := range MaxDevices {
			le.PutUint64(s[slotUsed+d*memSize+memTotal:], p.MemoryUsed[d])
			le.PutUint64(s[slotSMUtil+d*utilSize+utilSM:], p.SMUtil[d])
		}
	}
	le.PutUint32(b[offProcNum:], uint32(len(im.Procs)))
	le.PutUint32(b[offUtilSwitch:], uint32(im.UtilizationSwitch))
	le.PutUint32(b[offRecent:], uint32(im.RecentKernel))
	le.PutUint32(b[offPriority:], uint32(im.Priority))
	le.PutUint64(b[offLastKernel:], uint64(im.LastKernelTime))
	return b
}

// WriteFile writes the region to path.
func (im Image) WriteFile(path string) error {
	if err := os.WriteFile(path, im.Bytes(), 0o666); err != nil {
		return fmt.Errorf("writing hami region %s: %w", path, err)
	}
	return nil
}

// Launch does to the file what the library's rate limiter does before a
// kernel launch: if the container is blocked (recent_kernel < 0) the launch
// waits and Launch reports false; otherwise it records the launch
// (recent_kernel = 2) and reports true. Only for a container whose rate
// limiter runs (Snapshot.CanThrottle); the priority simulator plays the
// library with it.
func (f *File) Launch() (bool, error) {
	s, err := f.Read()
	if err != nil {
		return false, err
	}
	if s.RecentKernel < 0 {
		return false, nil
	}
	return true, f.SetRecentKernel(RecentKernelLaunched)
}
