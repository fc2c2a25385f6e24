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

func (c *Controller) suspended(cd *card, p *offline, reason string, latency time.Duration, now time.Time) {
	p.frozenAt = now
	if reason != ReasonOnlineBusy {
		c.cfg.Observer.Suspended(cd.id, reason, 0)
		return
	}
	c.cfg.Observer.Suspended(cd.id, reason, latency)
	c.sendEvent(p)
}

func (c *Controller) resumed(cd *card, p *offline, now time.Time) {
	if p.frozen != ReasonOnlineBusy {
		c.cfg.Observer.Resumed(cd.id, p.frozen, 0)
		return
	}
	var latency time.Duration
	if !cd.act.idleFrom.IsZero() {
		latency = now.Sub(cd.act.idleFrom)
	}
	c.cfg.Observer.Resumed(cd.id, p.frozen, latency)
}

// sendEvent tells the offline pod it was suspended. The message is the
// same for every suspension on a card, so that the agent's recorder, which
// lets one Event of a reason on a pod through per interval, counts the
// repeats on one Event instead of writing each (the numbers of suspensions
// and the time frozen are metrics, docs/priority.md).
func (c *Controller) sendEvent(p *offline) {
	if c.cfg.Recorder == nil {
		return
	}
	ref := &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.namespace, Name: p.name, UID: types.UID(p.uid)}
	c.cfg.Recorder.Event(ref, v1.EventTypeNormal, ReasonSuspended, fmt.Sprintf(
		"Suspended while an online pod on card %d (%s) was busy", p.card.Index, p.card.UUID))
}
