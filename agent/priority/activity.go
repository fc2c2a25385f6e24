package priority

import (
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ActivityModel says how NVML's per-process samples become "the online
// pods of a card are busy".
type ActivityModel int

const (
	// ActivitySamples (the default) knows NVML's sample period: a process
	// is busy from a busy sample until a later sample of it says idle (the
	// idle window starts at the last busy sample's own timestamp: the idle
	// sample covers the time since), or until no sample of it came for
	// SampleStale (it stopped; idle from its last busy sample). Between
	// samples nothing changes, so nothing flaps.
	ActivitySamples ActivityModel = iota
	// ActivityPerPoll is the model before issue 17, kept only so that the
	// simulator and a test can show what it did: busy when this poll got a
	// new busy sample, idle when it got none, so a continuously busy online
	// pod looks idle between NVML's samples and its offline pods thaw and
	// refreeze every sample period.
	ActivityPerPoll
)

func (m ActivityModel) String() string {
	if m == ActivityPerPoll {
		return "per-poll"
	}
	return "samples"
}

// activity is what a card's online pods are doing: busy now, or idle since
// idleFrom (zero: never seen busy).
type activity struct {
	busy     bool
	idleFrom time.Time
}

// preempting reports whether the offline pods must stay suspended at now.
func (a activity) preempting(now time.Time, idle time.Duration) bool {
	return a.busy || (!a.idleFrom.IsZero() && now.Sub(a.idleFrom) < idle)
}

// procSample is the latest NVML sample of one online process.
type procSample struct {
	at       time.Time
	busy     bool
	idleFrom time.Time // when it was last known busy
}

// nvmlActivity reads a card's online activity from NVML.
type nvmlActivity struct {
	lastSeen uint64 // newest sample timestamp seen (µs), NVML's lastSeenTimeStamp
	procs    map[uint32]*procSample
	// per-poll model only
	pollBusy     bool
	pollIdleFrom time.Time
}

// onlineActivity reads the card's NVML samples newer than the last seen.
func (c *Controller) onlineActivity(cd *card, now time.Time) (activity, error) {
	a := &cd.nvml
	if a.procs == nil {
		a.procs = map[uint32]*procSample{}
	}
	samples, err := c.processSamples(cd, now)
	if err != nil {
		return activity{}, err
	}
	newBusy := false
	for _, s := range samples {
		if !cd.online[c.podOf(s.Pid)] {
			continue
		}
		busy := s.SmUtil > c.cfg.BusyUtil
		newBusy = newBusy || busy
		at := time.UnixMicro(int64(s.TimeStamp))
		p := a.procs[s.Pid]
		if p == nil {
			p = &procSample{}
			a.procs[s.Pid] = p
		}
		if at.Before(p.at) {
			continue // an older sample than one already seen
		}
		if p.busy && !busy {
			// A sample covers the period up to its timestamp: this one says
			// nothing ran since the previous (busy) one, so the process was
			// last busy at that sample's own timestamp.
			p.idleFrom = p.at
		}
		p.at, p.busy = at, busy
	}
	if c.cfg.Activity == ActivityPerPoll {
		return a.perPoll(newBusy, now), nil
	}
	return a.fromSamples(now, c.cfg.SampleStale), nil
}

// fromSamples: busy while some online process's latest sample is busy and
// not stale; otherwise idle from the latest moment any was known busy.
func (a *nvmlActivity) fromSamples(now time.Time, stale time.Duration) activity {
	var out activity
	for pid, p := range a.procs {
		if p.busy && now.Sub(p.at) > stale {
			// No sample for longer than NVML's period: the process stopped
			// (or exited) some time after its last busy sample.
			p.busy, p.idleFrom = false, p.at
		}
		if p.busy {
			out.busy = true
		}
		if p.idleFrom.After(out.idleFrom) {
			out.idleFrom = p.idleFrom
		}
		if !p.busy && now.Sub(p.at) > 2*stale && now.Sub(p.idleFrom) > 2*stale {
			delete(a.procs, pid) // long gone: keep the map bounded
		}
	}
	if out.busy {
		out.idleFrom = time.Time{}
	}
	return out
}

// perPoll is ActivityPerPoll: the idle window starts at the first poll
// without a new busy sample.
func (a *nvmlActivity) perPoll(newBusy bool, now time.Time) activity {
	switch {
	case newBusy:
		a.pollBusy, a.pollIdleFrom = true, time.Time{}
	case a.pollBusy:
		a.pollBusy, a.pollIdleFrom = false, now
	}
	return activity{busy: a.pollBusy, idleFrom: a.pollIdleFrom}
}

// podOf maps a PID to its pod UID through its cgroup, cached until the next
// grants refresh (PIDs are reused only after the process is gone, and the
// cache is short-lived). A PID that cannot be resolved belongs to no pod.
func (c *Controller) podOf(pid uint32) string {
	if uid, ok := c.pidPods[pid]; ok {
		return uid
	}
	uid, err := c.cfg.Procs.PodUID(pid)
	if err != nil {
		uid = ""
	}
	c.pidPods[pid] = uid
	return uid
}

// DevicesByUUID returns the node's NVML devices by UUID (NVML initialised).
func DevicesByUUID(lib nvml.Interface) (map[string]nvml.Device, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting devices: %s", ret.Error())
	}
	out := map[string]nvml.Device{}
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("device %d: %s", i, ret.Error())
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("device %d: UUID: %s", i, ret.Error())
		}
		out[uuid] = dev
	}
	return out, nil
}
