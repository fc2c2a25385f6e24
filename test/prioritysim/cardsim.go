// Package prioritysim simulates one card under the real online/offline
// priority controller (agent/priority) in simulated time, for
// cmd/qgpu-priority-sim and docs/priority.md's figures: it lives out of the
// agent's packages, which do not link it.
package prioritysim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
	"github.com/qgpu-scheduler/qgpu/agent/priority"
	"github.com/qgpu-scheduler/qgpu/test/prioritysim/simnode"
)

// CardSim configures a simulated card under the real controller: the
// online process alternates idle and busy phases (kernels back to back
// while busy), each offline process keeps Queue kernels of Kernel length
// queued on the card, the card shares itself equally among the processes
// that have work, and NVML samples every NVMLPeriod. Everything runs in
// simulated time, 1 ms steps, deterministic for a seed.
type CardSim struct {
	Mechanism        string // priority.MechFreezer or priority.MechInterception
	Activity         priority.ActivityModel
	Duration         time.Duration
	Busy, Idle       time.Duration // the online phases (±20% by the seed)
	OnlineKernel     time.Duration
	Kernel           time.Duration // offline kernel length (±20% by the seed)
	Queue            int           // offline kernels kept queued
	NVMLPeriod       time.Duration
	Poll, IdleWindow time.Duration
	BlockedRecheck   time.Duration // HAMi-core re-checks a blocked launch every second
	Seed             uint64
	CgroupV1         bool
}

// CardResult is what a CardSim run measured. Suspend runs from the online
// process's first launch of a busy phase to the last offline kernel
// finishing with the offline pods suspended; Resume from its last kernel
// finishing to an offline pod's next launch. ThawsWhileBusy counts offline
// pods let go during busy phases (the freeze cap's breaks included, shown
// apart as Capped).
type CardResult struct {
	Suspend, Resume        []time.Duration
	ThawsWhileBusy, Capped int
	Episodes               int
	Missed                 int     // busy phases that ended before the offline pods were suspended
	OfflineShare           float64 // share of the card the offline pods used
}

type simProc struct {
	pid      uint32
	uid      string
	queue    []time.Duration // remaining work of queued kernels, head running
	blocked  time.Time       // interception: launches wait until then
	region   *hamiregion.File
	held     bool // frozen, or blocked in its region: read after every poll (only a poll changes it)
	launched bool // online: a launch recorded in its region since the last poll
}

// Run simulates the card under a real controller in dir.
func (cs CardSim) Run(ctx context.Context, dir string) (CardResult, error) {
	var res CardResult
	v := cgroup.V2
	if cs.CgroupV1 {
		v = cgroup.V1
	}
	s, err := simnode.NewSim(filepath.Join(dir, "node"), v, !cs.CgroupV1, cs.NVMLPeriod)
	if err != nil {
		return res, err
	}
	cfg, err := Config(s, cs.Poll, cs.IdleWindow)
	if err != nil {
		return res, err
	}
	cfg.Activity = cs.Activity
	obs := &simObserver{}
	cfg.Observer = obs
	procs := []*simProc{{pid: simnode.OnlinePID, uid: simnode.SimOnline}, {pid: 200, uid: simnode.SimOffline1}, {pid: 201, uid: simnode.SimOffline2}}
	if cs.Mechanism == priority.MechInterception {
		cfg.RegionRoot = filepath.Join(dir, "regions")
		paths, err := s.EnableRegions(cfg.RegionRoot)
		if err != nil {
			return res, err
		}
		for _, p := range procs {
			if p.region, err = hamiregion.Open(paths[p.uid]); err != nil {
				return res, err
			}
			defer p.region.Close()
		}
	}
	ctrl, err := priority.New(cfg)
	if err != nil {
		return res, err
	}
	if err := ctrl.Start(ctx, s.Now); err != nil {
		return res, err
	}
	defer ctrl.ThawAll(ctx)
	w := &simWorld{cs: cs, s: s, ctrl: ctrl, procs: procs, obs: obs, rng: rand.New(rand.NewPCG(cs.Seed, 17)), res: &res}
	return res, w.run(ctx)
}

// simObserver counts resumptions; the rest of priority.Observer is not measured.
type simObserver struct{ resumes int }

func (o *simObserver) Resumed(priority.CardID, string, time.Duration)   { o.resumes++ }
func (o *simObserver) Suspended(priority.CardID, string, time.Duration) {}
func (o *simObserver) FrozenPods(priority.CardID, int)                  {}
func (o *simObserver) NVMLError(priority.CardID)                        {}

type simWorld struct {
	cs    CardSim
	s     *simnode.Sim
	ctrl  *priority.Controller
	procs []*simProc
	obs   *simObserver
	rng   *rand.Rand
	res   *CardResult

	busy                      bool
	phaseEnd                  time.Time
	busyStart, lastOnlineDone time.Time
	suspendPending            bool
	resumePending             bool
	offlineWork, total        time.Duration
}

func (w *simWorld) jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*w.rng.Float64()))
}

func (w *simWorld) run(ctx context.Context) error {
	const step = time.Millisecond
	start := w.s.Now
	w.phaseEnd = start.Add(w.jitter(w.cs.Idle))
	nextPoll := start.Add(w.cs.Poll)
	for w.s.Now.Sub(start) < w.cs.Duration {
		now := w.s.Advance(step)
		w.phase(now)
		if err := w.launch(now); err != nil {
			return err
		}
		w.execute(now, step)
		if !now.Before(nextPoll) {
			before := w.obs.resumes
			w.ctrl.Tick(ctx, now)
			if err := w.readHeld(); err != nil {
				return err
			}
			if w.busy && w.obs.resumes > before {
				w.res.ThawsWhileBusy += w.obs.resumes - before
				w.res.Capped += w.ctrl.FreezeBreaks(now)
			}
			nextPoll = nextPoll.Add(w.cs.Poll)
		}
		w.measure(now)
	}
	if w.total > 0 {
		w.res.OfflineShare = float64(w.offlineWork) / float64(w.total)
	}
	return nil
}

// readHeld reads what the controller wrote: frozen cgroups, blocked regions.
func (w *simWorld) readHeld() error {
	for _, p := range w.procs {
		p.launched = false // the controller consumed it
		p.held = w.s.Frozen(p.uid)
		if p.region != nil && !p.held {
			snap, err := p.region.Read()
			if err != nil {
				return err
			}
			p.held = snap.RecentKernel < 0
		}
	}
	return nil
}

// phase flips the online process between idle and busy.
func (w *simWorld) phase(now time.Time) {
	if now.Before(w.phaseEnd) {
		return
	}
	w.busy = !w.busy
	if w.busy {
		w.phaseEnd = now.Add(w.jitter(w.cs.Busy))
		w.busyStart, w.suspendPending = now, true
		w.res.Episodes++
	} else {
		w.phaseEnd = now.Add(w.jitter(w.cs.Idle))
	}
}

// launch lets each process submit what it can: the online one a kernel
// whenever its queue is empty during a busy phase, the offline ones up to
// Queue kernels unless frozen or blocked.
func (w *simWorld) launch(now time.Time) error {
	for i, p := range w.procs {
		if i == 0 {
			if w.busy && len(p.queue) == 0 {
				// The library records every launch; between two polls only
				// the first write changes the file.
				if p.region != nil && !p.launched {
					if _, err := p.region.Launch(); err != nil {
						return err
					}
					p.launched = true
				}
				p.queue = append(p.queue, w.cs.OnlineKernel)
			}
			continue
		}
		for len(p.queue) < w.cs.Queue && w.mayLaunch(p, now) {
			if w.resumePending {
				w.res.Resume = append(w.res.Resume, now.Sub(w.lastOnlineDone))
				w.resumePending = false
			}
			p.queue = append(p.queue, w.jitter(w.cs.Kernel))
		}
	}
	return nil
}

func (w *simWorld) mayLaunch(p *simProc, now time.Time) bool {
	if p.region == nil {
		return !p.held
	}
	if now.Before(p.blocked) {
		return false // asleep in HAMi-core's blocked-launch loop
	}
	ok, err := p.region.Launch()
	if err != nil || !ok {
		p.blocked = now.Add(w.cs.BlockedRecheck)
		return false
	}
	return true
}

// execute shares the step equally among the processes with queued work.
func (w *simWorld) execute(now time.Time, step time.Duration) {
	var active []*simProc
	for _, p := range w.procs {
		if len(p.queue) > 0 {
			active = append(active, p)
		}
	}
	for i, p := range w.procs {
		busy := len(p.queue) > 0
		if busy {
			share := step / time.Duration(len(active))
			p.queue[0] -= share
			if i > 0 {
				w.offlineWork += share
			}
			if p.queue[0] <= 0 {
				p.queue = p.queue[1:]
			}
		}
		w.s.Cards[0].SetBusy(p.pid, busy)
		if i == 0 && busy && len(p.queue) == 0 && !w.busy {
			w.lastOnlineDone, w.resumePending = now, true // its last kernel of the phase finished
		}
	}
	w.total += step
}

// measure records a suspension once both offline pods are held and their
// queues have drained.
func (w *simWorld) measure(now time.Time) {
	if !w.suspendPending {
		return
	}
	for _, p := range w.procs[1:] {
		if len(p.queue) > 0 || !p.held {
			if !w.busy {
				w.suspendPending = false // the phase ended first: never suspended in it
				w.res.Missed++
			}
			return
		}
	}
	w.res.Suspend = append(w.res.Suspend, now.Sub(w.busyStart))
	w.suspendPending = false
}

// CardSimDefaults returns a CardSim for a named scenario.
func CardSimDefaults(scenario string) (CardSim, error) {
	cs := CardSim{Duration: time.Minute, OnlineKernel: 2 * time.Millisecond, Kernel: 20 * time.Millisecond,
		Queue: 4, NVMLPeriod: time.Second / 6, Poll: priority.DefaultPoll, IdleWindow: priority.DefaultIdle,
		BlockedRecheck: time.Second, Seed: 1}
	switch scenario {
	case "busy-online":
		// Busy phases below the freezer's 10 s cap, so every release
		// while busy is a flap.
		cs.Busy, cs.Idle = 8*time.Second, 2*time.Second
	case "bursty-online":
		cs.Busy, cs.Idle = 50*time.Millisecond, 450*time.Millisecond
	default:
		return cs, fmt.Errorf("scenario %q: must be busy-online or bursty-online", scenario)
	}
	return cs, nil
}

// RunCardSim runs cs in a temporary directory.
func RunCardSim(ctx context.Context, cs CardSim) (CardResult, error) {
	dir, err := os.MkdirTemp("", "qgpu-priority-sim-")
	if err != nil {
		return CardResult{}, err
	}
	defer os.RemoveAll(dir)
	return cs.Run(ctx, dir)
}

// Percentile returns the q-quantile (0..1) of ds, nearest rank; 0 for none.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Config is a controller configuration for the simulated node.
func Config(s *simnode.Sim, poll, idle time.Duration) (priority.Config, error) {
	n, err := s.Node()
	if err != nil {
		return priority.Config{}, err
	}
	return priority.Config{Poll: poll, Idle: idle, Grants: n.Grants, Pods: n.Pods, Devices: n.Devices,
		Freezer: n.Freezer, Procs: n.Procs, ProcRoot: n.ProcRoot}, nil
}
