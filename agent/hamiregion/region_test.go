package hamiregion

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const gpu0 = "GPU-0b7e3c1a-5d2f-4c8e-9a1b-2c3d4e5f6a7b"

func image() Image {
	return Image{UUIDs: []string{gpu0}, SMLimit: []uint64{30},
		Procs:             []Proc{{PID: 7, HostPID: 4242, Status: 1}, {PID: 9, HostPID: 0, Status: 1}},
		UtilizationSwitch: 1, RecentKernel: 2, Priority: 1, LastKernelTime: 1_700_000_000}
}

// TestLayoutOffsets pins the offsets to what the C compiler gives
// shared_region_t (gcc, offsetof and sizeof over the structs of HAMi-core
// 8f3a89c's multiprocess_memory_limit.h, linux/amd64).
func TestLayoutOffsets(t *testing.T) {
	for name, got := range map[string]int{"device_num": offDeviceNum, "limit": offLimit, "sm_limit": offSMLimit,
		"procs": offProcs, "proc_num": offProcNum, "utilization_switch": offUtilSwitch,
		"recent_kernel": offRecent, "last_kernel_time": offLastKernel, "size": Size, "file": FileSize} {
		want := map[string]int{"device_num": 56, "limit": 1600, "sm_limit": 1728, "procs": 1856,
			"proc_num": 2008896, "utilization_switch": 2008900, "recent_kernel": 2008904,
			"last_kernel_time": 2008912, "size": 2008952, "file": 2008953}[name]
		if got != want {
			t.Errorf("%s at %d, want %d", name, got, want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, v := range Known {
		im := image()
		im.Version = v
		got, err := Parse(im.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		want := Snapshot{Version: v, UUIDs: im.UUIDs, SMLimit: im.SMLimit, Procs: im.Procs,
			UtilizationSwitch: 1, RecentKernel: 2, Priority: 1, LastKernelTime: im.LastKernelTime}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", v, d)
		}
	}
}

func TestRefused(t *testing.T) {
	good := image().Bytes()
	with := func(f func(b []byte)) []byte { b := append([]byte(nil), good...); f(b); return b }
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrSize},
		{"torn: cut after the header", good[:offProcs+10], ErrSize},
		{"torn: one byte short", good[:Size-1], ErrSize},
		{"not initialised yet (magic 0)", with(func(b []byte) { le.PutUint32(b, 0) }), ErrMagic},
		{"garbled magic", with(func(b []byte) { copy(b, "garbage!") }), ErrMagic},
		{"unknown version 2.0", Image{Version: Version{2, 0}}.Bytes(), ErrUnknownLayout},
		{"unknown version 1.0", Image{Version: Version{1, 0}}.Bytes(), ErrUnknownLayout},
		{"unknown version 1.3", Image{Version: Version{1, 3}}.Bytes(), ErrUnknownLayout},
		{"device_num 17", with(func(b []byte) { le.PutUint64(b[offDeviceNum:], 17) }), ErrCorrupt},
		{"device_num 0 (the library has not asked NVML yet)", with(func(b []byte) { le.PutUint64(b[offDeviceNum:], 0) }), ErrCorrupt},
		{"a shifted layout labelled 1.1, 32 bytes longer", append(Image{Version: Version{1, 1}, UUIDs: []string{gpu0}}.Bytes(), make([]byte, 32)...), ErrSize},
		{"one byte longer", append(append([]byte(nil), good...), 0), ErrSize},
		{"the struct without the byte the library writes past it", good[:Size], ErrSize},
		{"proc_num -1", with(func(b []byte) { le.PutUint32(b[offProcNum:], 0xffffffff) }), ErrCorrupt},
		{"proc_num 1025", with(func(b []byte) { le.PutUint32(b[offProcNum:], 1025) }), ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.data); !errors.Is(err, tc.want) {
				t.Errorf("Parse: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCanThrottleAndAlive(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sw       int32
		limit    uint64
		throttle bool
	}{{"limit 30 switch on", 1, 30, true}, {"switch off", 0, 30, false},
		{"no limit", 1, 0, false}, {"limit 100", 1, 100, false}} {
		s := Snapshot{UtilizationSwitch: tc.sw, SMLimit: []uint64{tc.limit}}
		if s.CanThrottle() != tc.throttle {
			t.Errorf("%s: CanThrottle = %v", tc.name, !tc.throttle)
		}
	}
	dead := func(int32) bool { return false }
	stale := Snapshot{Procs: []Proc{{PID: 7, HostPID: 4242}}}
	if stale.Alive(dead) {
		t.Error("a region whose only process is dead is alive")
	}
	if !(Snapshot{Procs: []Proc{{PID: 7}}}).Alive(dead) {
		t.Error("a process whose host PID is not known yet must count as alive")
	}
	if (Snapshot{}).Alive(func(int32) bool { return true }) {
		t.Error("a region without processes is alive")
	}
}

func TestFileWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cudevshr.cache")
	im := image()
	im.RecentKernel = 0
	if err := im.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ok, err := f.Launch(); !ok || err != nil {
		t.Fatalf("Launch on an unblocked region: %v %v", ok, err)
	}
	if s, _ := f.Read(); s.RecentKernel != RecentKernelLaunched {
		t.Errorf("recent_kernel after a launch = %d", s.RecentKernel)
	}
	if err := f.SetRecentKernel(RecentKernelBlocked); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.Launch(); ok || err != nil {
		t.Errorf("Launch on a blocked region went through: %v %v", ok, err)
	}
	if err := f.SetUtilizationSwitch(0); err != nil {
		t.Fatal(err)
	}
	if s, _ := f.Read(); s.UtilizationSwitch != 0 || s.RecentKernel != RecentKernelBlocked {
		t.Errorf("after writes: %+v", s)
	}
	// The container replaced its region with an unknown layout: no write.
	if err := (Image{Version: Version{9, 9}}).WriteFile(path); err != nil {
		t.Fatal(err)
	}
	if err := f.SetRecentKernel(0); !errors.Is(err, ErrUnknownLayout) {
		t.Errorf("write into an unknown layout: %v", err)
	}
	// Replaced by a longer layout that still says 1.1: no write.
	if err := os.WriteFile(path, append(Image{Version: Version{1, 1}, UUIDs: []string{gpu0}}.Bytes(), make([]byte, 32)...), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := f.SetRecentKernel(0); !errors.Is(err, ErrSize) {
		t.Errorf("write into a longer layout labelled 1.1: %v", err)
	}
	// Truncated (torn) under the reader: refused, and no write grows it back.
	if err := os.Truncate(path, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Read(); !errors.Is(err, ErrSize) {
		t.Errorf("read of a truncated region: %v", err)
	}
	if err := f.SetRecentKernel(0); err == nil {
		t.Error("write into a truncated region succeeded")
	}
	if fi, _ := os.Stat(path); fi.Size() != 100 {
		t.Errorf("the write changed the truncated file's size to %d", fi.Size())
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a missing file: %v", err)
	}
}

// FuzzParse: any bytes either parse into a snapshot within the layout's
// bounds or are refused with one of the package's errors; never a panic.
func FuzzParse(f *testing.F) {
	good := image().Bytes()
	f.Add(good[:offProcs+64], good[offProcNum:])
	f.Add([]byte{}, []byte{0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, prefix, tail []byte) {
		// The fuzzer mutates the header, the first slot and the switches
		// (proc_num first); the rest is a valid region.
		data := image().Bytes()
		copy(data, prefix)
		copy(data[offProcNum:], tail)
		if len(prefix) > FileSize {
			data = prefix
		}
		s, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrSize) && !errors.Is(err, ErrMagic) && !errors.Is(err, ErrUnknownLayout) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if len(s.UUIDs) > MaxDevices || len(s.Procs) > MaxProcs || !known(s.Version) {
			t.Fatalf("out of bounds: %d devices, %d procs, %s", len(s.UUIDs), len(s.Procs), s.Version)
		}
	})
}

// TestOpenRefusesOtherSizes: a region file of any size but the library's
// for its layout is refused, and the error says which file, its size and
// the size wanted.
func TestOpenRefusesOtherSizes(t *testing.T) {
	for _, extra := range []int{-1, 1, 32} {
		t.Run(strconv.Itoa(extra), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			data := image().Bytes()
			if extra < 0 {
				data = data[:len(data)+extra]
			} else {
				data = append(data, make([]byte, extra)...)
			}
			if err := os.WriteFile(path, data, 0o666); err != nil {
				t.Fatal(err)
			}
			_, err := Open(path)
			if !errors.Is(err, ErrSize) {
				t.Fatalf("Open: %v, want ErrSize", err)
			}
			for _, want := range []string{path, strconv.Itoa(len(data)), strconv.Itoa(FileSize)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
		})
	}
}

// TestUsageAtTheLibrarysOffsets writes usage where HAMi-core's
// shrreg_proc_slot_t puts it (offsets worked out by hand from the header of
// layouts 1.1 and 1.2: slots from 1856, 1960 bytes each; used[d].total at
// 8+64d+32, device_util[d].sm_util at 1160+48d+16), not through Image, and
// reads it back summed by card.
func TestUsageAtTheLibrarysOffsets(t *testing.T) {
	b := Image{UUIDs: []string{"GPU-a", "GPU-b"}, Procs: []Proc{{PID: 7, HostPID: 70}, {PID: 8, HostPID: 80}}}.Bytes()
	put := func(off int, v uint64) { le.PutUint64(b[off:], v) }
	put(1856+8+0*64+32, 1<<30)        // proc 0, card 0: 1 GiB
	put(1856+1960+8+0*64+32, 512<<20) // proc 1, card 0: 512 MiB
	put(1856+1960+8+1*64+32, 3<<30)   // proc 1, card 1: 3 GiB
	put(1856+1160+0*48+16, 30)        // proc 0, card 0: 30 %
	put(1856+1960+1160+1*48+16, 55)   // proc 1, card 1: 55 %
	s, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []CardUsage{{UUID: "GPU-a", MemoryUsed: 1<<30 + 512<<20, SMUtil: 30}, {UUID: "GPU-b", MemoryUsed: 3 << 30, SMUtil: 55}}
	if diff := cmp.Diff(want, s.Usage()); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}
