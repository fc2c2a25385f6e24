package priority

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/record"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
	"github.com/qgpu-scheduler/qgpu/test/prioritysim/simnode"
)

// interceptionHarness is a harness whose pods have HAMi-core regions;
// edit may spoil them before the controller starts.
func interceptionHarness(t *testing.T, edit func(s *simnode.Sim, paths map[string]string)) (*harness, map[string]string) {
	t.Helper()
	var paths map[string]string
	h := newHarness(t, cgroup.V2, true, nvmlPeriod, func(c *Config) {
		c.RegionRoot = filepath.Join(t.TempDir(), "regions")
	})
	var err error
	if paths, err = h.s.EnableRegions(h.c.cfg.RegionRoot); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(h.s, paths)
	}
	h.run(DefaultGrantsEvery+poll, nil) // a grants refresh finds the regions
	return h, paths
}

func region(t *testing.T, path string) hamiregion.Snapshot {
	t.Helper()
	s, err := hamiregion.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// launch is the online container launching a kernel through the library.
func launch(t *testing.T, path string) {
	t.Helper()
	f, err := hamiregion.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Launch(); err != nil {
		t.Fatal(err)
	}
}

// TestInterception: an online launch blocks the offline containers'
// launches at the next poll (no cgroup frozen); they are let go idle after
// the last online launch, within a poll more; the switch is restored.
func TestInterception(t *testing.T) {
	h, paths := interceptionHarness(t, nil)
	blocked := func(uid string) bool { return region(t, paths[uid]).RecentKernel == hamiregion.RecentKernelBlocked }
	launch(t, paths[simnode.SimOnline])
	h.run(poll, nil)
	if !blocked(simnode.SimOffline1) || !blocked(simnode.SimOffline2) {
		t.Fatal("offline pods not blocked a poll after an online launch")
	}
	if s := region(t, paths[simnode.SimOffline1]); s.UtilizationSwitch != 1 {
		t.Errorf("blocked region's switch %d: the library would not check the block", s.UtilizationSwitch)
	}
	// Launches every 50 ms for a second: never let go in between.
	for range 20 {
		launch(t, paths[simnode.SimOnline])
		h.run(50*time.Millisecond, func() {
			if !blocked(simnode.SimOffline1) || !blocked(simnode.SimOffline2) {
				t.Fatal("offline pods let go while the online pod launches")
			}
		})
	}
	last := h.s.Now.Add(-50 * time.Millisecond) // the poll that saw the last launch
	d := h.until(func() bool { return !blocked(simnode.SimOffline1) && !blocked(simnode.SimOffline2) }, time.Second, "release")
	if gone := h.s.Now.Sub(last); gone < idle || gone > idle+poll {
		t.Errorf("released %s after the last launch was seen (waited %s), want [%s, %s]", gone, d, idle, idle+poll)
	}
	if s := region(t, paths[simnode.SimOffline1]); s.UtilizationSwitch != 0 {
		t.Errorf("switch not restored: %d", s.UtilizationSwitch)
	}
	if h.s.Frozen(simnode.SimOffline1) || h.s.Frozen(simnode.SimOffline2) || h.s.SidecarFrozen(simnode.SimOffline1) {
		t.Error("a cgroup was frozen although the interception layer held the pods")
	}
}

// TestInterceptionFallback: a region the controller does not trust leaves
// that pod to the freezer (unknown version, torn file); a stale online
// region (its process is dead) leaves activity to NVML.
func TestInterceptionFallback(t *testing.T) {
	h, paths := interceptionHarness(t, func(s *simnode.Sim, paths map[string]string) {
		if err := (hamiregion.Image{Version: hamiregion.Version{Major: 1, Minor: 9}}).WriteFile(paths[simnode.SimOffline1]); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(paths[simnode.SimOffline2])
		os.WriteFile(paths[simnode.SimOffline2], data[:4096], 0o644) // torn
		// The online region's only process is dead (no /proc/<host pid>), its last launch left behind.
		stale := hamiregion.Image{UUIDs: []string{simnode.Card0}, SMLimit: []uint64{50}, UtilizationSwitch: 1,
			RecentKernel: hamiregion.RecentKernelLaunched, Procs: []hamiregion.Proc{{PID: 1, HostPID: 99999, Status: 1}}}
		if err := stale.WriteFile(paths[simnode.SimOnline]); err != nil {
			t.Fatal(err)
		}
	})
	if p := h.c.pods[simnode.SimOffline1]; p.mech != MechFreezer {
		t.Errorf("unknown layout: mechanism %s", p.mech)
	}
	if p := h.c.pods[simnode.SimOffline2]; p.mech != MechFreezer {
		t.Errorf("torn region: mechanism %s", p.mech)
	}
	launch(t, paths[simnode.SimOnline]) // a stale region's launch must not count
	h.run(5*poll, nil)
	if h.s.Frozen(simnode.SimOffline1) {
		t.Error("a stale online region's launch froze the offline pods")
	}
	h.s.SetOnlineBusy(true) // NVML sees the online pod busy
	h.until(h.frozen, time.Second, "NVML activity, freezer")
}

// TestRecoverBlocked: a previous agent was SIGKILLed while it held an
// offline pod's launches: the next one unblocks them at start.
func TestRecoverBlocked(t *testing.T) {
	h, paths := interceptionHarness(t, nil)
	launch(t, paths[simnode.SimOnline])
	h.run(poll, nil)
	if region(t, paths[simnode.SimOffline1]).RecentKernel != hamiregion.RecentKernelBlocked {
		t.Fatal("not blocked")
	}
	// A new controller on the same node (the old one vanished without thawAll).
	cfg := h.c.cfg
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(h.ctx, h.s.Now); err != nil {
		t.Fatal(err)
	}
	defer c.ThawAll(h.ctx)
	for _, uid := range []string{simnode.SimOffline1, simnode.SimOffline2} {
		if region(t, paths[uid]).RecentKernel < 0 {
			t.Errorf("pod %s left blocked after a restart", uid)
		}
	}
}

// withProcs rewrites a region the simulator wrote with other process slots.
func withProcs(t *testing.T, path string, procs ...hamiregion.Proc) {
	t.Helper()
	s := region(t, path)
	im := hamiregion.Image{Version: s.Version, UUIDs: s.UUIDs, SMLimit: s.SMLimit, Procs: procs,
		UtilizationSwitch: s.UtilizationSwitch, RecentKernel: s.RecentKernel, Priority: s.Priority}
	if err := im.WriteFile(path); err != nil {
		t.Fatal(err)
	}
}

// TestInterceptionNeedsHostPIDs: HAMi-core runs no rate limiter in a
// process that has not found its host PID, so such a process neither
// records launches nor honours a block. An offline pod with one is left to
// the freezer; an online pod with one has its activity read from NVML.
func TestInterceptionNeedsHostPIDs(t *testing.T) {
	known := hamiregion.Proc{PID: 1, HostPID: 200, Status: 1} // simnode.SimOffline1's process
	tests := []struct {
		name  string
		procs []hamiregion.Proc
		want  string
	}{
		{"every process has its host PID", []hamiregion.Proc{known}, MechInterception},
		{"a free slot", []hamiregion.Proc{known, {}}, MechInterception},
		{"a second process without its host PID", []hamiregion.Proc{known, {PID: 2, Status: 1}}, MechFreezer},
		{"the only process without its host PID", []hamiregion.Proc{{PID: 1, Status: 1}}, MechFreezer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := interceptionHarness(t, func(_ *simnode.Sim, paths map[string]string) { withProcs(t, paths[simnode.SimOffline1], tc.procs...) })
			if got := h.c.pods[simnode.SimOffline1].mech; got != tc.want {
				t.Errorf("mechanism %s, want %s", got, tc.want)
			}
		})
	}
	t.Run("online process without its host PID: NVML decides", func(t *testing.T) {
		h, paths := interceptionHarness(t, func(_ *simnode.Sim, paths map[string]string) {
			// The library records none of this process's launches.
			withProcs(t, paths[simnode.SimOnline], hamiregion.Proc{PID: 1, Status: 1})
		})
		h.s.SetOnlineBusy(true)
		h.until(func() bool {
			return region(t, paths[simnode.SimOffline1]).RecentKernel == hamiregion.RecentKernelBlocked
		},
			time.Second, "NVML activity of an online pod whose launches go unrecorded")
	})
}

// TestInterceptionBypassed: an offline pod whose process keeps computing
// while its launches are blocked (launches HAMi-core does not intercept)
// is frozen with the cgroup freezer once NVML shows it past the grace,
// its regions let go, a Warning Event says why, and it stays on the
// freezer for the next suspension; the other offline pod, idle while
// blocked, stays on interception.
func TestInterceptionBypassed(t *testing.T) {
	rec := record.NewFakeRecorder(100)
	var paths map[string]string
	h := newHarness(t, cgroup.V2, true, nvmlPeriod, func(c *Config) {
		c.RegionRoot = filepath.Join(t.TempDir(), "regions")
		c.Recorder = rec
	})
	var err error
	if paths, err = h.s.EnableRegions(h.c.cfg.RegionRoot); err != nil {
		t.Fatal(err)
	}
	h.run(DefaultGrantsEvery+poll, nil)
	blocked := func(uid string) bool { return region(t, paths[uid]).RecentKernel == hamiregion.RecentKernelBlocked }
	launching := func() { launch(t, paths[simnode.SimOnline]) }
	launching()
	h.run(poll, nil)
	if !blocked(simnode.SimOffline1) || !blocked(simnode.SimOffline2) {
		t.Fatal("offline pods not blocked a poll after an online launch")
	}
	h.s.Cards[0].SetBusy(200, true) // simnode.SimOffline1's process computes through the block
	start := h.s.Now
	for !h.s.Frozen(simnode.SimOffline1) {
		if h.s.Now.Sub(start) > h.c.bypassGrace()+time.Second {
			t.Fatalf("a pod computing through its block not frozen within %s", h.s.Now.Sub(start))
		}
		launching()
		h.run(50*time.Millisecond, nil)
	}
	if d := h.s.Now.Sub(start); d < h.c.bypassGrace() {
		t.Errorf("frozen %s after the block, before the grace %s", d, h.c.bypassGrace())
	}
	if blocked(simnode.SimOffline1) {
		t.Error("the frozen pod's regions still blocked")
	}
	if h.s.Frozen(simnode.SimOffline2) || !blocked(simnode.SimOffline2) {
		t.Errorf("the idle offline pod: frozen %v, blocked %v; want interception", h.s.Frozen(simnode.SimOffline2), blocked(simnode.SimOffline2))
	}
	if ev := drain(rec); !strings.Contains(ev, ReasonInterceptionBypassed) {
		t.Errorf("events %q, want %s", ev, ReasonInterceptionBypassed)
	}
	// Idle online pod: both let go; busy again: the freezer for the one
	// that bypassed, interception for the other.
	h.s.Cards[0].SetBusy(200, false)
	h.until(func() bool { return !h.s.Frozen(simnode.SimOffline1) && !blocked(simnode.SimOffline2) }, 2*time.Second, "release")
	h.run(DefaultGrantsEvery+poll, nil) // a grants refresh must not bring interception back
	launching()
	h.run(2*poll, nil)
	if !h.s.Frozen(simnode.SimOffline1) || blocked(simnode.SimOffline1) {
		t.Errorf("next suspension of the pod that bypassed: frozen %v, blocked %v; want the freezer", h.s.Frozen(simnode.SimOffline1), blocked(simnode.SimOffline1))
	}
	if h.s.Frozen(simnode.SimOffline2) || !blocked(simnode.SimOffline2) {
		t.Error("next suspension of the other pod: not by interception")
	}
}

func drain(rec *record.FakeRecorder) string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}
