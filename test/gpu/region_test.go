package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
)

const card = "GPU-5b3f0d6e-1111-2222-3333-444455556666"

func regionImage(switchOn int32, procs ...hamiregion.Proc) hamiregion.Image {
	return hamiregion.Image{UUIDs: []string{card}, SMLimit: []uint64{30}, Procs: procs, UtilizationSwitch: switchOn}
}

func TestJudgeRegion(t *testing.T) {
	used := hamiregion.Proc{PID: 42, HostPID: 42, Status: 1}
	used.MemoryUsed[0] = 600 << 20
	for _, tc := range []struct {
		name string
		im   hamiregion.Image
		want string // a problem's text, "" for none
	}{
		{"as the agent set it", regionImage(1, used), ""},
		{"another card", hamiregion.Image{UUIDs: []string{"GPU-other"}, SMLimit: []uint64{30}, Procs: []hamiregion.Proc{used}}, "ordinal 0"},
		{"another SM limit", hamiregion.Image{UUIDs: []string{card}, SMLimit: []uint64{100}, Procs: []hamiregion.Proc{used}}, "sm_limit"},
		{"no slot for the process", regionImage(1, hamiregion.Proc{PID: 7, HostPID: 7}), "no process slot for pid 42"},
		{"host pid not the pid", regionImage(1, hamiregion.Proc{PID: 42, HostPID: 1042}), "host pid 1042"},
		{"no memory", regionImage(1, hamiregion.Proc{PID: 42, HostPID: 42}), "no memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := hamiregion.Parse(tc.im.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			v := judgeRegion(s, card, 30, 42)
			if (tc.want == "") != v.pass || !strings.Contains(v.why, tc.want) {
				t.Errorf("%v, want %q", v, tc.want)
			}
		})
	}
}

// TestOpenRegionWaits: the library creates the region at its first CUDA
// call and registers the process's host PID later; the reader waits for
// both, and says what it last saw when they do not come.
func TestOpenRegionWaits(t *testing.T) {
	path := filepath.Join(t.TempDir(), hamiregion.FileName)
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = regionImage(1, hamiregion.Proc{PID: 5}).WriteFile(path)
		time.Sleep(100 * time.Millisecond)
		_ = regionImage(1, hamiregion.Proc{PID: 5, HostPID: 5}).WriteFile(path)
	}()
	f, s, err := openRegion(context.Background(), path, 3*time.Second, 20*time.Millisecond, hostPIDsReady)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if !s.HostPIDsKnown() {
		t.Errorf("opened before the host PID was known: %+v", s.Procs)
	}
	_, _, err = openRegion(context.Background(), filepath.Join(t.TempDir(), "none"), 50*time.Millisecond, 10*time.Millisecond, hostPIDsReady)
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a region that never comes: %v", err)
	}
}

// TestBlocker: the writes of the priority controller's block
// (agent/priority/regions.go): recent_kernel -1 and the switch on while
// held, re-asserted when the library overwrote it, then recent_kernel 0
// and the switch as it was.
func TestBlocker(t *testing.T) {
	path := filepath.Join(t.TempDir(), hamiregion.FileName)
	if err := regionImage(0, hamiregion.Proc{PID: 5, HostPID: 5}).WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := hamiregion.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := &blocker{f: f, savedSwitch: -1}
	if err := b.hold(); err != nil {
		t.Fatal(err)
	}
	s, _ := f.Read()
	if s.RecentKernel != hamiregion.RecentKernelBlocked || s.UtilizationSwitch != 1 {
		t.Fatalf("held: recent_kernel %d switch %d", s.RecentKernel, s.UtilizationSwitch)
	}
	if err := f.SetRecentKernel(hamiregion.RecentKernelLaunched); err != nil { // the library's write
		t.Fatal(err)
	}
	b.overwritten = 0
	if err := b.hold(); err != nil {
		t.Fatal(err)
	}
	if s, _ := f.Read(); s.RecentKernel != hamiregion.RecentKernelBlocked || b.overwritten != 1 {
		t.Errorf("re-asserted: recent_kernel %d, overwritten %d", s.RecentKernel, b.overwritten)
	}
	if err := b.release(); err != nil {
		t.Fatal(err)
	}
	if s, _ := f.Read(); s.RecentKernel != 0 || s.UtilizationSwitch != 0 {
		t.Errorf("released: recent_kernel %d switch %d, want 0 and the switch found (0)", s.RecentKernel, s.UtilizationSwitch)
	}
}
