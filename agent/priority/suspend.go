package priority

import (
	"context"
	"errors"
	"os"
	"time"

	"k8s.io/klog/v2"
)

// locate finds p's pod cgroup directory once; false when it has none (yet).
func (c *Controller) locate(ctx context.Context, p *offline) bool {
	if p.podDir != "" {
		return true
	}
	dir, err := c.cfg.Freezer.PodDir(p.uid)
	if err != nil {
		// Expected for a moment while the pod starts; for good, the agent
		// does not see the host's cgroups (see docs/priority.md).
		p.logOnce(ctx, "nocgroup", "Offline pod has no cgroup yet; it cannot be frozen", "err", err)
		return false
	}
	p.podDir = dir
	return true
}

// containerDirs returns the cgroup directories of p's granted containers
// that are running now; never the pod's own directory, so sidecars and
// the pause container keep running.
func (c *Controller) containerDirs(ctx context.Context, p *offline) []string {
	if !c.locate(ctx, p) {
		return nil
	}
	var out []string
	for _, name := range p.containers {
		id := p.ids[name]
		if id == "" {
			continue // not started, or the pod object is not known yet
		}
		dir, ok := p.dirs[id]
		if !ok {
			d, err := c.cfg.Freezer.ContainerDir(p.podDir, id)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					p.podDir = "" // the pod's cgroup went away: look it up again
				}
				continue
			}
			dir, p.dirs[id] = d, d
		}
		out = append(out, dir)
	}
	return out
}

// apply suspends (want != "") or resumes (want == "") p if it is not so
// already, and reports the change. start is when the poll that decided it began.
func (c *Controller) apply(ctx context.Context, cd *card, p *offline, want string, start, now time.Time) {
	if p == nil {
		return
	}
	was := p.frozen == ReasonOnlineBusy
	c.write(ctx, cd, p, want, start, now)
	if is := p.frozen == ReasonOnlineBusy; is != was && c.cfg.Reporter != nil {
		c.cfg.Reporter.PodSuspended(PodRef{UID: p.uid, Namespace: p.namespace, Name: p.name, Card: p.card}, is, now)
	}
}

// write is apply without the report. With the interception layer the
// block is re-asserted every poll; with the freezer, containers that
// (re)started while the pod is held are frozen too.
func (c *Controller) write(ctx context.Context, cd *card, p *offline, want string, start, now time.Time) {
	var changed bool
	var err error
	if p.mech == MechInterception {
		changed = (p.frozen == "") != (want == "")
		err = c.block(p, want != "")
	} else {
		changed, err = c.freeze(ctx, p, want != "")
	}
	if err != nil {
		p.logOnce(ctx, "writefail", "Suspension write failed; retrying every poll", "mechanism", p.mech, "err", err)
		return
	}
	delete(p.logged, "writefail")
	if !changed {
		if p.frozen != "" || want == "" || p.mech == MechInterception {
			p.frozen = want // same state; the reason may change (online-busy → time-slice)
		}
		return
	}
	if want != "" {
		c.suspended(cd, p, want, now.Sub(start), now)
	} else {
		c.resumed(cd, p, now)
	}
	p.frozen = want
	c.cfg.Observer.FrozenPods(cd.id, c.frozenOn(cd))
}

// freeze freezes (on) or thaws p's granted containers. changed is whether
// p went from running to frozen or back.
func (c *Controller) freeze(ctx context.Context, p *offline, on bool) (changed bool, err error) {
	if !on {
		if len(p.frozenDirs) == 0 {
			return p.frozen != "", nil
		}
		var keep []string
		for _, dir := range p.frozenDirs {
			if err := c.cfg.Freezer.Thaw(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
				keep = append(keep, dir)
			}
		}
		p.frozenDirs = keep
		if len(keep) > 0 {
			return false, errors.New("thawing some containers failed")
		}
		return true, nil
	}
	var errs []error
	for _, dir := range c.containerDirs(ctx, p) {
		if containsDir(p.frozenDirs, dir) {
			continue
		}
		if err := c.cfg.Freezer.Freeze(dir); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // the container went away
			}
			errs = append(errs, err)
			continue
		}
		p.frozenDirs = append(p.frozenDirs, dir)
	}
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	if len(p.frozenDirs) == 0 {
		p.logOnce(ctx, "nothingfrozen", "Offline pod has no running GPU container to freeze yet")
		return false, nil
	}
	return p.frozen == "", nil
}

func containsDir(dirs []string, d string) bool {
	for _, x := range dirs {
		if x == d {
			return true
		}
	}
	return false
}

func (c *Controller) frozenOn(cd *card) int {
	n := 0
	for _, p := range c.pods {
		if p.card == cd.id && p.frozen != "" {
			n++
		}
	}
	return n
}

// mayFreeze applies the freezer's limits: never a pod being deleted or one
// whose probes tolerate no freeze, and a single freeze no longer than
// capFor, then a break of breakFor.
func (c *Controller) mayFreeze(ctx context.Context, p *offline, now time.Time) bool {
	if p.deleting {
		return false
	}
	if p.mech == MechInterception {
		return true
	}
	if p.noFreeze {
		p.logOnce(ctx, "nofreeze", "A liveness probe with failureThreshold 1 tolerates no freeze; the offline pod is never frozen")
		return false
	}
	if now.Before(p.breakUntil) {
		return false
	}
	if p.frozen != "" && now.Sub(p.frozenAt) >= p.capFor {
		p.breakUntil = now.Add(p.breakFor)
		klog.FromContext(ctx).V(2).Info("Freeze capped for the pod's liveness probes", "pod", klog.KRef(p.namespace, p.name), "cap", p.capFor, "break", p.breakFor)
		return false
	}
	return true
}
