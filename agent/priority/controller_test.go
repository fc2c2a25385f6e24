package priority

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/client-go/tools/record"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/prioritysim/simnode"
)

const (
	poll = 10 * time.Millisecond
	idle = 100 * time.Millisecond
	// nvmlPeriod: NVML's per-process sample period on many cards.
	nvmlPeriod = 1000 * time.Millisecond / 6
)

var layouts = []struct {
	name    string
	version cgroup.Version
	systemd bool
}{
	{"v2-systemd", cgroup.V2, true},
	{"v1-cgroupfs", cgroup.V1, false},
}

// harness steps a controller in simulated time: no goroutine, no wall clock.
// simConfig is a controller configuration for the simulated node.
func simConfig(s *simnode.Sim, poll, idle time.Duration) (Config, error) {
	n, err := s.Node()
	if err != nil {
		return Config{}, err
	}
	return Config{Poll: poll, Idle: idle, Grants: n.Grants, Pods: n.Pods, Devices: n.Devices,
		Freezer: n.Freezer, Procs: n.Procs, ProcRoot: n.ProcRoot}, nil
}

type harness struct {
	t   *testing.T
	s   *simnode.Sim
	c   *Controller
	ctx context.Context
}

func newHarness(t *testing.T, v cgroup.Version, systemd bool, period time.Duration, edit func(*Config)) *harness {
	t.Helper()
	s, err := simnode.NewSim(t.TempDir(), v, systemd, period)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := simConfig(s, poll, idle)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, s: s, c: c, ctx: context.Background()}
	if err := c.Start(h.ctx, s.Now); err != nil {
		t.Fatal(err)
	}
	return h
}

// run polls for d; each (if set) is called after every poll.
func (h *harness) run(d time.Duration, each func()) {
	for end := h.s.Now.Add(d); h.s.Now.Before(end); {
		h.c.Tick(h.ctx, h.s.Advance(poll))
		if each != nil {
			each()
		}
	}
}

func (h *harness) frozen() bool {
	return h.s.Frozen(simnode.SimOffline1) && h.s.Frozen(simnode.SimOffline2)
}
func (h *harness) thawed() bool {
	return !h.s.Frozen(simnode.SimOffline1) && !h.s.Frozen(simnode.SimOffline2)
}

// until polls until cond holds (at most limit) and returns the simulated time it took.
func (h *harness) until(cond func() bool, limit time.Duration, what string) time.Duration {
	h.t.Helper()
	start := h.s.Now
	for !cond() {
		if h.s.Now.Sub(start) > limit {
			h.t.Fatalf("%s: not within %s of simulated time", what, limit)
		}
		h.c.Tick(h.ctx, h.s.Advance(poll))
	}
	return h.s.Now.Sub(start)
}

// TestSuspendResume is the freezer's promise, in simulated time with
// NVML sampling every 1/6 s: the offline pods' GPU containers are frozen
// within a sample period and a poll of the online process turning busy,
// never thawed while it stays busy, thawed no sooner than idle after it
// stops and within max(2 periods, a period + idle) + a poll; sidecars and the
// general pod are never touched.
func TestSuspendResume(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			h := newHarness(t, l.version, l.systemd, nvmlPeriod, nil)
			for cycle := range 5 {
				h.run(time.Duration(cycle+1)*37*time.Millisecond, nil) // a different phase each cycle
				h.s.SetOnlineBusy(true)
				if d := h.until(h.frozen, 2*time.Second, "suspend"); d > nvmlPeriod+poll {
					t.Errorf("cycle %d: suspended after %s > period %s + poll", cycle, d, nvmlPeriod)
				}
				thaws := 0
				h.run(3*time.Second, func() {
					if !h.frozen() {
						thaws++
					}
				})
				if thaws != 0 {
					t.Errorf("cycle %d: offline pods thawed in %d polls while the online pod was busy", cycle, thaws)
				}
				h.s.SetOnlineBusy(false)
				// The sample that straddles the stop still says busy; the next
				// one (a period later) says idle, and the window counts from
				// the straddling sample's timestamp.
				d := h.until(h.thawed, 3*time.Second, "resume")
				if most := max(2*nvmlPeriod, nvmlPeriod+idle) + poll; d < idle || d > most {
					t.Errorf("cycle %d: resumed %s after the stop, want in [%s, %s]", cycle, d, idle, most)
				}
				h.run(time.Second, func() {
					if !h.thawed() {
						t.Fatalf("cycle %d: frozen while the online pod is idle", cycle)
					}
				})
			}
			for _, uid := range []string{simnode.SimOffline1, simnode.SimOffline2} {
				if h.s.SidecarFrozen(uid) {
					t.Errorf("pod %s: sidecar or pod cgroup frozen", uid)
				}
			}
			if h.s.GeneralTouched() {
				t.Error("the general pod's freezer was written")
			}
		})
	}
}

// TestPerPollModelFlaps proves issue 17's defect and its fix on the same
// scripted card (NVML sampling once a second, online busy for 5 s): the
// old per-poll model thaws the offline pods between samples, the sample
// model never does.
func TestPerPollModelFlaps(t *testing.T) {
	for _, tc := range []struct {
		model     ActivityModel
		wantFlaps bool
	}{{ActivityPerPoll, true}, {ActivitySamples, false}} {
		t.Run(tc.model.String(), func(t *testing.T) {
			h := newHarness(t, cgroup.V2, true, time.Second, func(c *Config) { c.Activity = tc.model })
			h.s.SetOnlineBusy(true)
			h.until(h.frozen, 2*time.Second, "suspend")
			thaws, was := 0, true
			h.run(5*time.Second, func() {
				if f := h.frozen(); was && !f {
					thaws++
				} else {
					was = f
				}
				was = h.frozen()
			})
			if (thaws > 0) != tc.wantFlaps {
				t.Errorf("%d thaws while busy; want flapping %v", thaws, tc.wantFlaps)
			}
		})
	}
}

// TestNeverFrozenWhileIdle: an online process that holds a context but runs
// nothing, and a busy process of a pod that is not online (the general pod
// on the other card), never freeze anything.
func TestNeverFrozenWhileIdle(t *testing.T) {
	h := newHarness(t, cgroup.V2, false, nvmlPeriod, nil)
	h.run(3*time.Second, func() {
		if !h.thawed() {
			t.Fatal("offline pod frozen with the online pod idle")
		}
	})
	if h.s.GeneralTouched() {
		t.Error("the general pod's freezer was written")
	}
}

func TestThawOnShutdown(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			h := newHarness(t, l.version, l.systemd, nvmlPeriod, nil)
			h.s.SetOnlineBusy(true)
			h.until(h.frozen, time.Second, "busy online pod")
			h.c.ThawAll(h.ctx) // what Run defers; the online pod is still busy
			if !h.thawed() {
				t.Error("offline pods left frozen after the controller stopped")
			}
		})
	}
}

// TestThawLeftoversAtStart: a previous agent was SIGKILLed with offline
// pods frozen (their GPU containers, or by an older agent the whole pod):
// the next agent thaws all of it before its first poll, on v1 and v2.
func TestThawLeftoversAtStart(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			s, err := simnode.NewSim(t.TempDir(), l.version, l.systemd, nvmlPeriod)
			if err != nil {
				t.Fatal(err)
			}
			cfg, _ := simConfig(s, poll, idle)
			for _, dir := range []string{s.GPU[simnode.SimOffline1], s.Dirs[simnode.SimOffline2], s.GPU[simnode.SimOffline2]} {
				if err := cfg.Freezer.Freeze(dir); err != nil {
					t.Fatal(err)
				}
			}
			c, _ := New(cfg)
			if err := c.Start(context.Background(), s.Now); err != nil {
				t.Fatal(err)
			}
			if s.Frozen(simnode.SimOffline1) || s.Frozen(simnode.SimOffline2) || s.SidecarFrozen(simnode.SimOffline2) {
				t.Error("leftover frozen cgroups not thawed at start")
			}
		})
	}
}

// TestDeletedWhileFrozen: deleting a frozen offline pod completes. On v1
// the kubelet cannot kill frozen tasks, so the controller thaws a pod as
// soon as it has a deletion timestamp and never freezes it again.
func TestDeletedWhileFrozen(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			h := newHarness(t, l.version, l.systemd, nvmlPeriod, nil)
			h.s.SetOnlineBusy(true)
			h.until(h.frozen, time.Second, "busy online pod")
			qos := "besteffort" // simnode.SimOffline1's
			h.s.MarkDeleting(simnode.SimOffline1)
			if l.version == cgroup.V1 {
				if err := h.s.Tree.KillPod(qos, simnode.SimOffline1); err == nil {
					t.Fatal("the fake v1 kubelet killed a frozen pod: the test cannot tell")
				}
				h.until(func() bool { return !h.s.Frozen(simnode.SimOffline1) }, time.Second, "pod being deleted thawed")
				if !h.s.Frozen(simnode.SimOffline2) {
					t.Error("the other offline pod was thawed too")
				}
				h.run(2*time.Second, func() { // never frozen again, though the online pod is busy
					if h.s.Frozen(simnode.SimOffline1) {
						t.Fatal("a pod being deleted was frozen again")
					}
				})
			}
			// v2 kills frozen tasks; v1 only once thawed.
			if err := h.s.Tree.KillPod(qos, simnode.SimOffline1); err != nil {
				t.Fatalf("kill: %v", err)
			}
			h.s.DropPod(simnode.SimOffline1)
			h.run(time.Second, nil) // the vanished cgroup and grant are forgotten without error
			if _, ok := h.c.pods[simnode.SimOffline1]; ok {
				t.Error("deleted pod still tracked")
			}
		})
	}
}

// TestFreezeCap: with a liveness probe of period 2 s, timeout 1 s and
// failureThreshold 3, no single freeze exceeds (3−1)·2 − 1 = 3 s and each
// is followed by a 3 s break; with failureThreshold 1 the pod is never frozen.
func TestFreezeCap(t *testing.T) {
	h := newHarness(t, cgroup.V2, true, nvmlPeriod, nil)
	h.s.SetLiveness(simnode.SimOffline1, 2, 1, 3)
	h.s.SetLiveness(simnode.SimOffline2, 2, 1, 1)
	h.run(time.Second, nil) // a grants refresh reads the probes
	h.s.SetOnlineBusy(true)
	var runs []time.Duration
	var since time.Time
	frozen := false
	h.run(20*time.Second, func() {
		if h.s.Frozen(simnode.SimOffline2) {
			t.Fatal("pod with failureThreshold 1 frozen")
		}
		f := h.s.Frozen(simnode.SimOffline1)
		if f != frozen {
			if frozen {
				runs = append(runs, h.s.Now.Sub(since))
			}
			frozen, since = f, h.s.Now
		}
		if f && h.s.Now.Sub(since) > 3*time.Second {
			t.Fatalf("frozen for %s > 3 s", h.s.Now.Sub(since))
		}
	})
	if len(runs) < 3 {
		t.Errorf("only %d capped freezes in 20 s: %v", len(runs), runs)
	}
}

// TestFailOpen: NVML errors thaw the card's offline pods at once, although
// the online pod may still be busy; when NVML answers again they are frozen
// again.
func TestFailOpen(t *testing.T) {
	obs := &countingObserver{}
	h := newHarness(t, cgroup.V2, true, nvmlPeriod, func(c *Config) { c.Idle, c.Observer = time.Hour, obs })
	h.s.SetOnlineBusy(true)
	h.until(h.frozen, time.Second, "busy online pod")
	h.s.Cards[0].SetError(gonvml.ERROR_UNKNOWN)
	if d := h.until(h.thawed, time.Second, "NVML failing"); d > poll {
		t.Errorf("thawed %s after the failure, want the next poll", d)
	}
	if obs.errors() == 0 {
		t.Error("no NVML error reported")
	}
	h.s.Cards[0].SetError(gonvml.SUCCESS)
	h.until(h.frozen, time.Second, "NVML back, online pod busy")
}

// TestOnlinePodGone: the online pod is deleted while busy (its grant goes).
func TestOnlinePodGone(t *testing.T) {
	h := newHarness(t, cgroup.V2, true, nvmlPeriod, nil)
	h.s.SetOnlineBusy(true)
	h.until(h.frozen, time.Second, "busy online pod")
	h.s.DropPod(simnode.SimOnline)
	if d := h.until(h.thawed, 2*time.Second, "online pod deleted"); d > DefaultGrantsEvery+poll {
		t.Errorf("thawed %s after the deletion", d)
	}
}

// TestEventPerSuspension: every preemption is told with the same message
// per card (the agent's recorder rate-limits and counts them, agent's
// TestEventCorrelation); releases are not told.
func TestEventPerSuspension(t *testing.T) {
	rec := record.NewFakeRecorder(100)
	h := newHarness(t, cgroup.V2, true, nvmlPeriod, func(c *Config) { c.Recorder = rec })
	for range 5 {
		h.s.SetOnlineBusy(true)
		h.until(h.frozen, time.Second, "busy")
		h.s.SetOnlineBusy(false)
		h.until(h.thawed, time.Second, "idle")
	}
	close(rec.Events)
	byMessage := map[string]int{}
	for e := range rec.Events {
		byMessage[e]++
	}
	if len(byMessage) != 1 {
		t.Fatalf("events: %v, want one message repeated", byMessage)
	}
	for e, n := range byMessage {
		if !strings.Contains(e, ReasonSuspended) || !strings.Contains(e, "Suspended while an online pod on card 0") {
			t.Errorf("event %q", e)
		}
		if n < 10 { // two offline pods, five preemptions each
			t.Errorf("%d events for 5 preemptions of 2 pods, want one per suspension", n)
		}
	}
}

// TestFixedShare: with the online pod idle, fixed-share time-slices the two
// offline pods (G 60 and 40): one at a time, in proportion to G.
func TestFixedShare(t *testing.T) {
	h := newHarness(t, cgroup.V2, true, nvmlPeriod, func(c *Config) {
		c.Policy = func() protocol.Policy { return protocol.PolicyFixedShare }
	})
	var run1, run2, both int
	h.run(10*time.Second, func() {
		f1, f2 := h.s.Frozen(simnode.SimOffline1), h.s.Frozen(simnode.SimOffline2)
		if !f1 && !f2 {
			both++
		}
		if !f1 {
			run1++
		}
		if !f2 {
			run2++
		}
	})
	t.Logf("polls running: pod1 (G=60) %d, pod2 (G=40) %d, both %d", run1, run2, both)
	if both > 0 {
		t.Errorf("both offline pods ran together in %d polls", both)
	}
	if ratio := float64(run1) / float64(run1+run2); ratio < 0.58 || ratio > 0.62 {
		t.Errorf("pod1 ran %.3f of the time, want 0.6", ratio)
	}
}

func TestSharesExact(t *testing.T) {
	for _, tc := range []struct {
		greedy map[string]int64
		want   map[string]int
	}{
		{map[string]int64{"a": 60, "b": 40}, map[string]int{"a": 600, "b": 400}},
		{map[string]int64{"a": 30}, map[string]int{"a": 300, "": 700}},
		{map[string]int64{"a": 100}, map[string]int{"a": 1000}},
		{map[string]int64{"a": 20, "b": 30, "c": 50}, map[string]int{"a": 200, "b": 300, "c": 500}},
	} {
		var s shares
		var pods []string
		for uid := range tc.greedy {
			pods = append(pods, uid)
		}
		got := map[string]int{}
		for range 1000 {
			got[s.next(sorted(pods), func(uid string) int64 { return tc.greedy[uid] })]++
		}
		for k, v := range tc.want {
			if d := got[k] - v; d < -1 || d > 1 {
				t.Errorf("greedy %v: ran %v, want %v", tc.greedy, got, tc.want)
				break
			}
		}
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

type countingObserver struct {
	nopObserver
	mu   sync.Mutex
	nvml int
}

func (o *countingObserver) NVMLError(CardID) { o.mu.Lock(); o.nvml++; o.mu.Unlock() }
func (o *countingObserver) errors() int      { o.mu.Lock(); defer o.mu.Unlock(); return o.nvml }
