package priority

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
)

// Mechanisms that suspend an offline pod, as metrics and logs name them.
const (
	MechFreezer      = "freezer"
	MechInterception = "interception"
)

// regionFile is one container's HAMi-core region and what the controller
// changed in it.
type regionFile struct {
	f *hamiregion.File
	// savedSwitch is the utilization_switch before a block turned it on (-1: untouched).
	savedSwitch int32
}

// regionsOf opens the regions of a pod's granted containers:
// <RegionRoot>/<pod UID>_<container>/cudevshr.cache (hamiregion.RegionPath),
// where the hami-core backend points each container's region. ok is false unless every container has
// exactly one region of a known layout.
func (c *Controller) regionsOf(uid string, containers []string, old []*regionFile) (files []*regionFile, ok bool, err error) {
	if c.cfg.RegionRoot == "" || len(containers) == 0 {
		return nil, false, nil
	}
	byPath := map[string]*regionFile{}
	for _, r := range old {
		byPath[r.f.Path] = r
	}
	defer func() { // close what is no longer used
		for _, r := range old {
			if !slices.Contains(files, r) {
				r.f.Close()
			}
		}
	}()
	for _, name := range containers {
		path, err := hamiregion.RegionPath(c.cfg.RegionRoot, uid, name)
		if err != nil {
			return files, false, err
		}
		if r, found := byPath[path]; found {
			files = append(files, r)
			continue
		}
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			return files, false, nil // the container has not started CUDA yet
		}
		f, err := hamiregion.Open(path)
		if err != nil {
			return files, false, err
		}
		files = append(files, &regionFile{f: f, savedSwitch: -1})
	}
	return files, true, nil
}

// alive reports whether a host PID is running (the region's processes).
func (c *Controller) alive(pid int32) bool {
	_, err := os.Stat(filepath.Join(c.cfg.ProcRoot, strconv.Itoa(int(pid))))
	return err == nil
}

// onlineLaunches reads the online containers' regions of the card: ok when
// every online pod has live regions whose launches the library records; a
// launch since the last poll moves the card's last launch to now and is
// consumed (recent_kernel 2 → 1, as HAMi's monitor decrements it).
func (c *Controller) onlineLaunches(ctx context.Context, cd *card, now time.Time) (activity, bool) {
	if c.cfg.RegionRoot == "" || len(cd.online) == 0 {
		return activity{}, false
	}
	for uid := range cd.online {
		files := c.onlineRegions[uid]
		if len(files) == 0 {
			return activity{}, false
		}
		live := 0
		for _, r := range files {
			s, err := r.f.Read()
			if err != nil {
				klog.FromContext(ctx).V(4).Info("Online region unreadable; NVML decides", "path", r.f.Path, "err", err)
				return activity{}, false
			}
			if !s.Alive(c.alive) {
				continue // stale: every process of it exited
			}
			if !s.CanThrottle() || !s.HostPIDsKnown() {
				return activity{}, false // the library records no launches for it, or not for all its processes
			}
			live++
			if s.RecentKernel >= hamiregion.RecentKernelLaunched {
				cd.lastLaunch = now
				if err := r.f.SetRecentKernel(1); err != nil {
					return activity{}, false
				}
			}
		}
		if live == 0 {
			return activity{}, false
		}
	}
	return activity{idleFrom: cd.lastLaunch}, true
}

// block holds back (or lets go) every launch of an offline pod's containers.
// It is re-asserted every poll: the library's own write of a launch can
// overwrite a block written at the same moment.
func (c *Controller) block(p *offline, on bool) error {
	var errs []error
	for _, r := range p.regions {
		s, err := r.f.Read()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch {
		case on && s.RecentKernel != hamiregion.RecentKernelBlocked:
			err = r.f.SetRecentKernel(hamiregion.RecentKernelBlocked)
		case !on && s.RecentKernel == hamiregion.RecentKernelBlocked:
			err = r.f.SetRecentKernel(0)
		}
		if err == nil && on && s.UtilizationSwitch != 1 {
			r.savedSwitch = s.UtilizationSwitch
			err = r.f.SetUtilizationSwitch(1) // the library only checks the block with its rate limiter on
		}
		if err == nil && !on && r.savedSwitch >= 0 {
			err = r.f.SetUtilizationSwitch(r.savedSwitch)
			r.savedSwitch = -1
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.f.Path, err))
		}
	}
	return errors.Join(errs...)
}

func closeRegions(files []*regionFile) {
	for _, r := range files {
		r.f.Close()
	}
}
