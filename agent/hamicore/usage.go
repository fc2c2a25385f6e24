package hamicore

import (
	"time"

	"github.com/qgpu-scheduler/qgpu/agent/metrics"
)

// Usage reads the region of every container holding a memory grant (one
// per container) and returns what the live ones say, as HAMi's monitor
// exports it: per card, the memory its processes hold and their SM
// utilisation; and when it last launched a kernel. A region that cannot be
// read, or whose processes are all gone, reports nothing: its numbers are
// the last a dead process wrote.
func (k *Keeper) Usage() []metrics.ContainerUsage {
	grants, err := k.cfg.Grants()
	if err != nil {
		return nil
	}
	var out []metrics.ContainerUsage
	for _, r := range k.openRegions(grants) {
		r.f.Close()
		index := map[string]int{}
		for _, sl := range r.g.Slices {
			index[sl.UUID] = sl.Index
		}
		u := metrics.ContainerUsage{Namespace: r.g.Namespace, Pod: r.g.Name, Container: r.g.Container}
		if r.s.LastKernelTime > 0 {
			u.LastKernel = time.Unix(r.s.LastKernelTime, 0)
		}
		for _, c := range r.s.Usage() {
			i, ok := index[c.UUID]
			if !ok {
				continue // a card the grant does not name: not the container's to report
			}
			u.Cards = append(u.Cards, metrics.CardUsage{Index: i, UUID: c.UUID, MemoryBytes: c.MemoryUsed, SMPercent: c.SMUtil})
		}
		out = append(out, u)
	}
	return out
}
