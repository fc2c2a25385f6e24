// Package priority is the agent's online/offline controller: per card,
// while any online pod is busy on the GPU, the card's offline pods are
// suspended, and they resume once the online pods have been idle for
// Config.Idle. Two mechanisms suspend: HAMi-core's interception layer
// (the offline containers' kernel launches are held back through their
// shared regions, agent/hamiregion) where every GPU container of the pod
// has a region the controller knows, else the cgroup freezer on the pod's
// GPU containers only. Activity comes from the online containers' regions
// (launches) where they record them, else from NVML's per-process samples.
// Under the fixed-share policy the offline pods of a card also take turns
// in proportion to their qgpu-core-greedy. General pods are never touched.
// docs/priority.md says what this guarantees and what was only simulated.
package priority

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Defaults of Config.
const (
	DefaultPoll        = 10 * time.Millisecond
	DefaultIdle        = 100 * time.Millisecond // the promised release delay (docs/priority.md)
	DefaultGrantsEvery = 500 * time.Millisecond
	// DefaultSampleStale: NVML samples a process every 1/6 s to 1 s,
	// depending on the card; a busy process with no sample for longer has
	// stopped. Half a second of margin over the longest period.
	DefaultSampleStale = 1500 * time.Millisecond
)

// Reasons a pod is frozen, as metrics label them.
const (
	ReasonOnlineBusy = "online-busy"
	ReasonTimeSlice  = "time-slice"
)

// PodResolver maps a host PID to the UID of its pod ("" when none).
type PodResolver interface {
	PodUID(pid uint32) (string, error)
}

// Config is what the controller reads and writes.
type Config struct {
	Poll, Idle time.Duration
	// GrantsEvery is how often the store is re-read for which pods are online
	// or offline on which card (what the agent really handed out).
	GrantsEvery time.Duration
	Grants      func() ([]store.Grant, error)
	// Policy returns the node's policy; fixed-share time-slices offline pods.
	Policy  func() protocol.Policy
	Devices map[string]nvml.Device // by card UUID
	Freezer *cgroup.Freezer
	Procs   PodResolver
	// BusyUtil: a process is busy when its SM utilisation sample is above it (percent).
	BusyUtil uint32
	// Recorder gets one Event per suspension (nil: no Events); the agent's
	// recorder rate-limits them per pod (client-go's correlator).
	Recorder record.EventRecorder
	Observer Observer // nil: no metrics
	// Reporter learns when an offline pod is suspended for a busy online
	// pod and when it resumes (nil: nobody); the agent shows it on the pod.
	Reporter PodReporter
	// Pods lists the node's pods (read with every grants refresh): the
	// offline containers' IDs (only those are frozen), deletion timestamps
	// (such pods are released and never suspended again) and liveness
	// probes (the freeze cap). nil: no pod is known, so the freezer freezes
	// nothing (interception still works).
	Pods func() ([]*v1.Pod, error)
	// MaxFreeze caps a single freeze (DefaultMaxFreeze; probes may lower it).
	MaxFreeze time.Duration
	// SampleStale: how long a busy process's last NVML sample stands.
	SampleStale time.Duration
	// Activity is the NVML activity model (ActivitySamples).
	Activity ActivityModel
	// RegionRoot is the host directory of HAMi-core's per-container
	// regions (hamiregion.RegionPath); "" turns interception off.
	RegionRoot string
	// ProcRoot is the host's /proc, to tell live region processes from dead ones.
	ProcRoot string
}

// PodReporter is told, on every change, whether an offline pod is frozen
// because an online pod on its card is busy (fixed-share time slices are
// not reported: they change every poll). It is called from the
// controller's loop and must not block.
type PodReporter interface {
	PodSuspended(pod PodRef, suspended bool, at time.Time)
}

// PodRef names an offline pod.
type PodRef struct {
	UID, Namespace, Name string
	Card                 CardID
}

func (c *Config) defaults() error {
	if c.Poll <= 0 {
		c.Poll = DefaultPoll
	}
	if c.Idle <= 0 {
		c.Idle = DefaultIdle
	}
	if c.GrantsEvery <= 0 {
		c.GrantsEvery = DefaultGrantsEvery
	}
	if c.MaxFreeze <= 0 {
		c.MaxFreeze = DefaultMaxFreeze
	}
	if c.SampleStale <= 0 {
		c.SampleStale = DefaultSampleStale
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	if c.Policy == nil {
		c.Policy = func() protocol.Policy { return protocol.DefaultPolicy }
	}
	if c.Grants == nil || c.Freezer == nil || c.Procs == nil {
		return errors.New("priority controller: grants, freezer and process resolver are required")
	}
	return nil
}

// Controller runs the per-card loop. Create with New, run with Run.
type Controller struct {
	cfg           Config
	cards         map[string]*card         // by UUID
	pods          map[string]*offline      // offline pods by UID
	onlineRegions map[string][]*regionFile // online pods' regions by UID
	pidPods       map[uint32]string        // PID → pod UID cache, cleared with every grants refresh
	lastGrants    time.Time
	now           time.Time // the current poll's time
}

// New checks cfg and returns a controller.
func New(cfg Config) (*Controller, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Controller{cfg: cfg, cards: map[string]*card{}, pods: map[string]*offline{},
		onlineRegions: map[string][]*regionFile{}, pidPods: map[uint32]string{}}, nil
}

// Run thaws any offline pod a previous agent left frozen, then polls every
// Config.Poll until ctx ends. Whatever way it returns (ctx, panic), every
// offline pod it knows is thawed first.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("priority")
	ctx = klog.NewContext(ctx, logger)
	defer c.ThawAll(ctx)
	if err := c.Start(ctx, time.Now()); err != nil {
		return err
	}
	logger.Info("Priority controller running", "freezer", c.cfg.Freezer.Version, "poll", c.cfg.Poll, "idle", c.cfg.Idle,
		"interception", c.cfg.RegionRoot != "", "activity", c.cfg.Activity)
	t := time.NewTicker(c.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.Tick(ctx, time.Now())
		}
	}
}

// Start reads the grants and undoes what a previous agent left suspended.
// Run calls it; Start, Tick and ThawAll drive the controller in simulated
// time (the tests, test/prioritysim).
func (c *Controller) Start(ctx context.Context, now time.Time) error {
	c.now = now
	if err := c.refresh(ctx, now); err != nil {
		return fmt.Errorf("priority controller: reading grants: %w", err)
	}
	c.recoverFrozen(ctx)
	return nil
}

// Tick is one poll at now (the only clock the decisions read: tests and
// the simulator step it in simulated time): refresh the pods if due, then
// decide every card.
func (c *Controller) Tick(ctx context.Context, now time.Time) {
	c.now = now
	if now.Sub(c.lastGrants) >= c.cfg.GrantsEvery {
		if err := c.refresh(ctx, now); err != nil {
			// Keep the last known pods: a store hiccup is no reason to
			// release (or freeze) anything.
			klog.FromContext(ctx).Error(err, "Reading grants; keeping the last known pods")
		}
	}
	policy := c.cfg.Policy()
	for _, cd := range c.cards {
		c.decide(ctx, cd, policy, now)
	}
}

// decide reads the card's online activity and suspends or resumes its
// offline pods.
func (c *Controller) decide(ctx context.Context, cd *card, policy protocol.Policy, now time.Time) {
	if len(cd.offline) == 0 {
		return
	}
	if len(cd.online) > 0 {
		act, ok := c.onlineLaunches(ctx, cd, now)
		if !ok {
			var err error
			if act, err = c.onlineActivity(cd, now); err != nil {
				c.failOpen(ctx, cd, err, now)
				return
			}
		}
		if cd.failing {
			cd.failing = false
			klog.FromContext(ctx).Info("GPU activity readable again", "card", cd.id.UUID)
		}
		cd.act = act
		cd.preempting = act.preempting(now, c.cfg.Idle)
	} else {
		cd.act, cd.preempting = activity{}, false // the online pods went away
	}
	c.checkBypass(ctx, cd, now)
	want := c.desired(cd, policy)
	for uid, reason := range want {
		if p := c.pods[uid]; p != nil && reason != "" && !c.mayFreeze(ctx, p, now) {
			want[uid] = ""
		}
	}
	// Suspensions first: a time-slice handover never lets two offline pods run together.
	for _, freeze := range []bool{true, false} {
		for _, uid := range cd.offline {
			if (want[uid] != "") == freeze {
				c.apply(ctx, cd, c.pods[uid], want[uid], now, now)
			}
		}
	}
}

// desired returns which offline pods of the card should be frozen, and why.
func (c *Controller) desired(cd *card, policy protocol.Policy) map[string]string {
	want := map[string]string{}
	if cd.preempting {
		for _, uid := range cd.offline {
			want[uid] = ReasonOnlineBusy
		}
		return want
	}
	if policy == protocol.PolicyFixedShare {
		running := cd.share.next(cd.offline, c.greedy)
		for _, uid := range cd.offline {
			if uid != running {
				want[uid] = ReasonTimeSlice
			}
		}
	}
	return want
}

func (c *Controller) greedy(uid string) int64 { return c.pods[uid].greedy }

// failOpen thaws the card's offline pods: without activity data the
// controller cannot tell whether they may run, and a wrongly frozen pod is
// worse than a wrongly running one.
func (c *Controller) failOpen(ctx context.Context, cd *card, err error, now time.Time) {
	c.cfg.Observer.NVMLError(cd.id)
	if !cd.failing {
		klog.FromContext(ctx).Error(err, "Reading GPU activity; releasing the card's offline pods until it works again", "card", cd.id.UUID)
	}
	cd.failing, cd.preempting, cd.act = true, false, activity{}
	for _, uid := range cd.offline {
		c.apply(ctx, cd, c.pods[uid], "", now, now)
	}
}
