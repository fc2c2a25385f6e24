package priority

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Observer receives what the controller does, for metrics.
type Observer interface {
	// Suspended: a pod was suspended; for ReasonOnlineBusy, latency runs from
	// the start of the poll that saw the online pod busy to the write.
	Suspended(card CardID, reason string, latency time.Duration)
	// Resumed: a pod was released; for ReasonOnlineBusy, latency runs from
	// the moment the online pods were last known busy (their last launch,
	// or the NVML sample that said idle) to the release written (≥ Idle,
	// except for releases that are not the idle window's: a capped freeze,
	// a pod being deleted, NVML failing).
	Resumed(card CardID, reason string, latency time.Duration)
	// FrozenPods is the number of the card's offline pods frozen now.
	FrozenPods(card CardID, n int)
	// NVMLError: reading the card's activity failed; its pods were thawed.
	NVMLError(card CardID)
}

type nopObserver struct{}

func (nopObserver) Suspended(CardID, string, time.Duration) {}
func (nopObserver) Resumed(CardID, string, time.Duration)   {}
func (nopObserver) FrozenPods(CardID, int)                  {}
func (nopObserver) NVMLError(CardID)                        {}

// Event reason on offline pods.
const ReasonSuspended = "QGPUSuspended"

// eventTally summarises a pod's preemptions between two Events: a busy online
// pod can freeze an offline one many times a second, and one Event per
// freeze would flood the API server.
type eventTally struct {
	count  int
	frozen time.Duration
	since  time.Time // start of the tally
	last   time.Time // when the last Event was sent
}

func (c *Controller) suspended(cd *card, p *offline, reason string, latency time.Duration, now time.Time) {
	p.frozenAt = now
	if reason != ReasonOnlineBusy {
		c.cfg.Observer.Suspended(cd.id, reason, 0)
		return
	}
	c.cfg.Observer.Suspended(cd.id, reason, latency)
	t, ok := c.events[p.uid]
	if !ok {
		t = &eventTally{since: now}
		c.events[p.uid] = t
	}
	t.count++
	if !ok {
		c.sendEvent(p, t, now) // the first preemption is told at once
	}
}

func (c *Controller) resumed(cd *card, p *offline, now time.Time) {
	held := now.Sub(p.frozenAt)
	if p.frozen != ReasonOnlineBusy {
		c.cfg.Observer.Resumed(cd.id, p.frozen, 0)
		return
	}
	var latency time.Duration
	if !cd.act.idleFrom.IsZero() {
		latency = now.Sub(cd.act.idleFrom)
	}
	c.cfg.Observer.Resumed(cd.id, p.frozen, latency)
	if t, ok := c.events[p.uid]; ok {
		t.frozen += held
	}
}

// flushEvents sends the summaries that are due: at most one Event per pod per
// EventInterval.
func (c *Controller) flushEvents(now time.Time) {
	for uid, t := range c.events {
		if t.count > 0 && now.Sub(t.last) >= c.cfg.EventInterval {
			c.sendEvent(c.pods[uid], t, now)
		}
	}
}

func (c *Controller) sendEvent(p *offline, t *eventTally, now time.Time) {
	if p == nil {
		return
	}
	if c.cfg.Recorder != nil {
		ref := &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.namespace, Name: p.name, UID: types.UID(p.uid)}
		c.cfg.Recorder.Event(ref, v1.EventTypeNormal, ReasonSuspended, fmt.Sprintf(
			"Suspended %d time(s) in the last %s (frozen %s in total) while an online pod on card %d (%s) was busy",
			t.count, now.Sub(t.since).Round(time.Second), t.frozen.Round(time.Millisecond), p.card.Index, p.card.UUID))
	}
	t.count, t.frozen, t.since, t.last = 0, 0, now, now
}
