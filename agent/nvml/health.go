package nvml

import (
	"context"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// HealthEvent reports that card Index changed health.
type HealthEvent struct {
	Index   int
	UUID    string
	Healthy bool
	Reason  string
}

// applicationXids are Xid errors caused by the application, not the card; the
// NVIDIA device plugin skips the same list.
var applicationXids = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// WatchHealth reports health changes until ctx ends: a failed health query
// (polled every interval) makes a card unhealthy until a query succeeds again;
// a critical Xid or double-bit ECC event makes it unhealthy until the agent
// restarts (the card needs a reset). A failed wait for events (other than
// its timeout) makes every card unhealthy, as NVIDIA's device plugin does:
// the agent can no longer see a card's critical errors. The event set is
// then opened again at every poll; once it opens, the cards are healthy
// again as far as events go. onChange runs on this goroutine.
func (d *Driver) WatchHealth(ctx context.Context, interval time.Duration, onChange func(HealthEvent)) {
	logger := klog.FromContext(ctx)
	w := &healthWatch{driver: d, logger: logger, onChange: onChange, queryFailed: map[int]bool{}, xid: map[int]uint64{}}
	if err := w.openEvents(); err != nil {
		logger.Error(err, "NVML events unavailable; polling health only")
	}
	defer w.closeEvents()
	w.poll()
	next := time.Now().Add(interval)
	for ctx.Err() == nil {
		if w.set != nil {
			w.waitEvent(200)
		} else {
			sleep(ctx, 200*time.Millisecond)
		}
		if time.Now().After(next) {
			if w.eventErr != "" {
				w.reopenEvents()
			}
			w.poll()
			next = time.Now().Add(interval)
		}
	}
}

func (d *Driver) registerEvents(logger klog.Logger, set nvml.EventSet) {
	want := uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)
	for i, dev := range d.devices {
		supported, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			logger.Info("Card does not report event types; polling only", "uuid", d.cards[i].UUID, "ret", ret.Error())
			continue
		}
		if ret := dev.RegisterEvents(want&supported, set); ret != nvml.SUCCESS {
			logger.Info("Registering card events failed; polling only", "uuid", d.cards[i].UUID, "ret", ret.Error())
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

type healthWatch struct {
	driver      *Driver
	logger      klog.Logger
	onChange    func(HealthEvent)
	set         nvml.EventSet  // nil: polling only
	eventErr    string         // the failed event wait, "" when events work
	queryFailed map[int]bool   // by position
	xid         map[int]uint64 // sticky critical Xid by position
	reported    []bool         // last reported health by position, nil until the first poll
}

func (w *healthWatch) poll() {
	for i := range w.driver.cards {
		w.queryFailed[i] = w.driver.Query(i) != nil
	}
	w.report()
}

func (w *healthWatch) openEvents() error {
	set, ret := w.driver.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("creating the NVML event set: %s", ret.Error())
	}
	w.set = set
	w.driver.registerEvents(w.logger, set)
	return nil
}

func (w *healthWatch) closeEvents() {
	if w.set != nil {
		w.set.Free()
		w.set = nil
	}
}

// reopenEvents tries to open the event set again after a failed wait.
func (w *healthWatch) reopenEvents() {
	if err := w.openEvents(); err != nil {
		w.logger.Error(err, "NVML events still failing; every card stays unhealthy")
		return
	}
	w.logger.Info("NVML events work again", "after", w.eventErr)
	w.eventErr = ""
}

func (w *healthWatch) waitEvent(timeoutMs uint32) {
	e, ret := w.set.Wait(timeoutMs)
	switch {
	case ret == nvml.ERROR_TIMEOUT:
		return
	case ret != nvml.SUCCESS:
		w.logger.Error(fmt.Errorf("%s", ret.Error()), "Waiting for NVML events failed; marking every card unhealthy")
		w.eventErr = ret.Error()
		w.closeEvents()
		w.report()
		return
	}
	if e.EventType == nvml.EventTypeXidCriticalError && applicationXids[e.EventData] {
		return
	}
	for i, dev := range w.driver.devices {
		if e.Device == nil || e.Device == dev {
			w.xid[i] = e.EventData
			if e.EventType != nvml.EventTypeXidCriticalError {
				w.xid[i] = 0 // 0: a double-bit ECC error, also sticky
			}
		}
	}
	w.report()
}

func (w *healthWatch) report() {
	if w.reported == nil {
		w.reported = make([]bool, len(w.driver.cards))
		for i := range w.reported {
			w.reported[i] = true
		}
	}
	for i, c := range w.driver.cards {
		_, sticky := w.xid[i]
		healthy := !w.queryFailed[i] && !sticky && w.eventErr == ""
		if healthy == w.reported[i] {
			continue
		}
		w.reported[i] = healthy
		w.onChange(HealthEvent{Index: c.Index, UUID: c.UUID, Healthy: healthy, Reason: w.reason(i)})
	}
}

func (w *healthWatch) reason(i int) string {
	if x, ok := w.xid[i]; ok && x != 0 {
		return fmt.Sprintf("NVML reported critical Xid %d", x)
	}
	if x, ok := w.xid[i]; ok && x == 0 {
		return "NVML reported a double-bit ECC error"
	}
	if w.queryFailed[i] {
		return "NVML health query failed"
	}
	if w.eventErr != "" {
		return "waiting for NVML events failed (" + w.eventErr + "): the card's critical errors cannot be seen"
	}
	return "NVML health query succeeded"
}
