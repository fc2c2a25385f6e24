// Package hamiregion reads and writes the shared region HAMi-core keeps per
// container (the file named by CUDA_DEVICE_MEMORY_SHARED_CACHE): the
// interception layer updates it on kernel launches and consults it before
// each launch, which is how the agent learns that an online container
// launches and how it holds an offline container's launches back. Only
// layouts this package knows are accepted: anything else is an error the
// caller treats as "no interception layer here" (the priority controller
// falls back to the cgroup freezer). See docs/priority.md.
package hamiregion

import (
	"errors"
	"fmt"
)

// The layout of shared_region_t in HAMi-core's multiprocess_memory_limit.h,
// as built for linux/amd64 and linux/arm64 (LP64, glibc: sem_t is 32
// bytes). Versions 1.1 and 1.2 have the same offsets for every field used
// here (1.2 turned the trailing padding into a second semaphore, and a
// slot's padding into a sequence lock); other versions are refused.
const (
	Magic = 19920718 // MULTIPROCESS_SHARED_REGION_MAGIC_FLAG

	MaxDevices = 16   // CUDA_DEVICE_MAX_COUNT
	MaxProcs   = 1024 // SHARED_REGION_MAX_PROCESS_NUM

	offMagic      = 0
	offMajor      = 4
	offMinor      = 8
	offDeviceNum  = 56 // after sm_init_flag, owner_pid (size_t) and sem_t
	offUUIDs      = 64
	uuidLen       = 96
	offLimit      = offUUIDs + MaxDevices*uuidLen // 1600
	offSMLimit    = offLimit + MaxDevices*8       // 1728
	offProcs      = offSMLimit + MaxDevices*8     // 1856
	procSlotSize  = 1960                          // shrreg_proc_slot_t
	slotPID       = 0
	slotHostPID   = 4
	slotUsed      = 8    // device_memory_t used[16], 64 bytes each
	memSize       = 64   // device_memory_t
	memTotal      = 32   // its total: context, module and data allocations
	slotSMUtil    = 1160 // device_util_t device_util[16], 48 bytes each
	utilSize      = 48   // device_util_t
	utilSM        = 16   // its sm_util, percent
	slotStatus    = 1928
	offProcNum    = offProcs + MaxProcs*procSlotSize // 2008896
	offUtilSwitch = offProcNum + 4
	offRecent     = offProcNum + 8
	offPriority   = offProcNum + 12
	offLastKernel = offProcNum + 16 // seconds since the epoch (time(NULL))

	// Size is sizeof(shared_region_t) of 1.1 (trailing uint64_t unused[4])
	// and 1.2 (sem_t sem_postinit there instead).
	Size = offLastKernel + 8 + 32
	// FileSize is the size of every region file the library writes: it
	// extends the file by writing one byte at offset sizeof(shared_region_t)
	// (try_create_shrreg), so the file is one byte longer than the struct.
	// Only this size is accepted: a HAMi-core main build between 2026-03-25
	// and 2026-04-24 wrote a shifted, larger layout still labelled 1.1, in
	// which the agent's write of recent_kernel would land in the last
	// process slot's status. The size is the one check a label cannot fake.
	FileSize = Size + 1
)

// Version is a region layout's version, as the library writes it.
type Version struct{ Major, Minor uint32 }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Known lists the layouts this package reads and writes.
var Known = []Version{{1, 1}, {1, 2}}

func known(v Version) bool {
	for _, k := range Known {
		if k == v {
			return true
		}
	}
	return false
}

// Errors of Parse and Open. All of them mean "do not trust this file": the
// caller falls back to a mechanism that does not need it.
var (
	ErrSize          = errors.New("hami region: file size is not its layout's")
	ErrMagic         = errors.New("hami region: magic mismatch (not initialised, or not a HAMi-core region)")
	ErrUnknownLayout = errors.New("hami region: unknown layout version")
	ErrCorrupt       = errors.New("hami region: field out of range")
)

// Values of the switches, as HAMi-core and HAMi's monitor use them.
const (
	// RecentKernelBlocked in recent_kernel makes every launch of the
	// container wait (the library re-checks once a second).
	RecentKernelBlocked = -1
	// RecentKernelLaunched is what the library writes on every launch it
	// throttles (the rate limiter is active: SM limit in (0,100), switch on).
	RecentKernelLaunched = 2
)
