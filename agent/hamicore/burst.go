package hamicore

import (
	"errors"
	"fmt"

	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// region is one granted container's region as this pass read it.
type region struct {
	f     *hamiregion.File
	s     hamiregion.Snapshot
	g     store.Grant // the container's memory grant
	cards []string
}

// Burst sets, under the burst-share policy, the utilisation switch of every
// granted container's region: off (no cap) while no other container with a
// live region shares any of its cards, on (capped at its SM limit) while
// one does. HAMi's monitor decides the same per card, counting containers
// whose recent_kernel shows launches; this counts containers with a live
// process in their region instead, because the library records launches
// only while its switch is on, so a container running uncapped would look
// idle to its neighbours. Regions the priority controller is blocking
// (recent_kernel -1) are left to it. It returns how many switches it turned.
func (k *Keeper) Burst() (changed int, err error) {
	if k.cfg.Policy() != protocol.PolicyBurstShare {
		return 0, nil
	}
	grants, err := k.cfg.Grants()
	if err != nil {
		return 0, fmt.Errorf("hamicore: listing grants: %w", err)
	}
	regions := k.openRegions(grants)
	defer func() {
		for _, r := range regions {
			r.f.Close()
		}
	}()
	present := map[string]int{} // card UUID → containers with a live region
	for _, r := range regions {
		for _, c := range r.cards {
			present[c]++
		}
	}
	var errs []error
	for _, r := range regions {
		if !r.s.HasSMLimit() || r.s.RecentKernel == hamiregion.RecentKernelBlocked {
			continue // no rate limiter to switch, or the priority controller holds it
		}
		want := int32(0)
		for _, c := range r.cards {
			if present[c] > 1 {
				want = 1
			}
		}
		if r.s.UtilizationSwitch == want {
			continue
		}
		if err := r.f.SetUtilizationSwitch(want); err != nil {
			errs = append(errs, err)
			continue
		}
		changed++
	}
	return changed, errors.Join(errs...)
}

// openRegions opens the region of every container holding a memory grant
// (every qGPU container does) whose region exists, parses and has a live
// process. A region that is missing or not HAMi-core's is skipped: its
// container has not started CUDA, or runs without the library.
func (k *Keeper) openRegions(grants []store.Grant) []region {
	var out []region
	for _, g := range grants {
		if g.Resource != protocol.ResourceMemory {
			continue
		}
		path, err := hamiregion.RegionPath(k.cfg.Root, g.PodUID, g.Container)
		if err != nil {
			continue
		}
		f, err := hamiregion.Open(path)
		if err != nil {
			continue
		}
		s, err := f.Read()
		if err != nil || !s.Alive(k.alive) {
			f.Close()
			continue
		}
		r := region{f: f, s: s, g: g}
		for _, sl := range g.Slices {
			r.cards = append(r.cards, sl.UUID)
		}
		out = append(out, r)
	}
	return out
}
