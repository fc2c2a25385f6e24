// Package priority is the agent's online/offline controller
// (docs/design.md#online-and-offline-pods-at-run-time): per card, while any
// online pod's process is busy on the GPU, the
// card's offline pods are frozen (cgroup freezer); they are thawed once the
// online pods have been idle for Config.Idle. Under the fixed-share policy the
// offline pods of a card also take turns in proportion to their
// qgpu-core-greedy. General pods are never touched. See README.md for what
// this guarantees, and what it cannot, compared with Tencent qGPU's driver.
package priority

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Defaults of Config.
const (
	DefaultPoll          = 10 * time.Millisecond
	DefaultIdle          = 100 * time.Millisecond // Tencent qGPU's release delay
	DefaultGrantsEvery   = 500 * time.Millisecond
	DefaultEventInterval = time.Minute
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
	BusyUtil      uint32
	Recorder      record.EventRecorder // nil: no Events
	EventInterval time.Duration
	Observer      Observer // nil: no metrics
	// Reporter learns when an offline pod is suspended for a busy online
	// pod and when it resumes (nil: nobody); the agent shows it on the pod.
	Reporter PodReporter
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
	if c.EventInterval <= 0 {
		c.EventInterval = DefaultEventInterval
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
	cfg        Config
	cards      map[string]*card       // by UUID
	pods       map[string]*offline    // offline pods by UID
	pidPods    map[uint32]string      // PID → pod UID cache, cleared with every grants refresh
	events     map[string]*eventTally // by pod UID
	lastGrants time.Time
}

// New checks cfg and returns a controller.
func New(cfg Config) (*Controller, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Controller{cfg: cfg, cards: map[string]*card{}, pods: map[string]*offline{},
		pidPods: map[uint32]string{}, events: map[string]*eventTally{}}, nil
}

// Run thaws any offline pod a previous agent left frozen, then polls every
// Config.Poll until ctx ends. Whatever way it returns (ctx, panic), every
// offline pod it knows is thawed first.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("priority")
	ctx = klog.NewContext(ctx, logger)
	defer c.thawAll(ctx)
	if err := c.refresh(ctx, time.Now()); err != nil {
		return fmt.Errorf("priority controller: reading grants: %w", err)
	}
	c.recoverFrozen(ctx)
	logger.Info("Priority controller running", "freezer", c.cfg.Freezer.Version, "poll", c.cfg.Poll, "idle", c.cfg.Idle)
	t := time.NewTicker(c.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.tick(ctx, time.Now())
		}
	}
}

// tick is one poll: refresh the pods if due, then decide every card.
func (c *Controller) tick(ctx context.Context, now time.Time) {
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
	c.flushEvents(now)
}

// decide reads the card's online activity and freezes or thaws its offline pods.
func (c *Controller) decide(ctx context.Context, cd *card, policy protocol.Policy, start time.Time) {
	if len(cd.offline) == 0 {
		return
	}
	if len(cd.online) > 0 {
		busy, err := c.onlineBusy(cd)
		if err != nil {
			c.failOpen(ctx, cd, err)
			return
		}
		if cd.failing {
			cd.failing = false
			klog.FromContext(ctx).Info("GPU activity readable again", "card", cd.id.UUID)
		}
		now := time.Now()
		switch {
		case busy:
			cd.preempting, cd.idleSince = true, time.Time{}
		case !cd.preempting:
		case cd.idleSince.IsZero():
			// Idle is counted from the first poll that saw the online pods
			// idle, so the offline pods never resume less than Idle after
			// the online pods really stopped.
			cd.idleSince = now
		case now.Sub(cd.idleSince) >= c.cfg.Idle:
			cd.preempting = false
		}
	} else {
		cd.preempting, cd.idleSince = false, time.Time{} // the online pods went away
	}
	want := c.desired(cd, policy)
	// Freezes first: a time-slice handover never lets two offline pods run together.
	for _, freeze := range []bool{true, false} {
		for _, uid := range cd.offline {
			if (want[uid] != "") == freeze {
				c.apply(ctx, cd, c.pods[uid], want[uid], start)
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
func (c *Controller) failOpen(ctx context.Context, cd *card, err error) {
	c.cfg.Observer.NVMLError(cd.id)
	if !cd.failing {
		klog.FromContext(ctx).Error(err, "Reading GPU activity; thawing the card's offline pods until it works again", "card", cd.id.UUID)
	}
	cd.failing, cd.preempting, cd.idleSince = true, false, time.Time{}
	for _, uid := range cd.offline {
		c.apply(ctx, cd, c.pods[uid], "", time.Now())
	}
}
