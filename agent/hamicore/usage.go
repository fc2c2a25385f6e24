package hamicore

import (
	"time"

	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ContainerUsage is what a container's region says it uses, as HAMi's
// monitor exports it: per card, the memory its processes hold and their SM
// utilisation; and when it last launched a kernel.
type ContainerUsage struct {
	Namespace, Pod, Container string
	Cards                     []CardUsage
	LastKernel                time.Time // zero when the library never wrote it
}

// CardUsage is a container's use of one of its cards.
type CardUsage struct {
	Index int // the card's NVML index on the node
	hamiregion.CardUsage
}

// Usage reads the region of every container holding a memory grant (one
// per container) and returns what the live ones say. A region that cannot
// be read, or whose processes are all gone, reports nothing: its numbers
// are the last a dead process wrote.
func (k *Keeper) Usage() []ContainerUsage {
	grants, err := k.cfg.Grants()
	if err != nil {
		return nil
	}
	var out []ContainerUsage
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
		f.Close()
		if err != nil || !s.Alive(k.alive) {
			continue
		}
		index := map[string]int{}
		for _, sl := range g.Slices {
			index[sl.UUID] = sl.Index
		}
		u := ContainerUsage{Namespace: g.Namespace, Pod: g.Name, Container: g.Container}
		if s.LastKernelTime > 0 {
			u.LastKernel = time.Unix(s.LastKernelTime, 0)
		}
		for _, c := range s.Usage() {
			i, ok := index[c.UUID]
			if !ok {
				continue // a card the grant does not name: not the container's to report
			}
			u.Cards = append(u.Cards, CardUsage{Index: i, CardUsage: c})
		}
		out = append(out, u)
	}
	return out
}
