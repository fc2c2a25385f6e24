package request

import (
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// parseContainer applies the per-class rules of DESIGN §2 to one container.
// ok is false for a container that asks for no qGPU resource.
func parseContainer(class protocol.Class, c *v1.Container) (Container, bool, error) {
	mem, err := integer(c, protocol.ResourceMemory)
	if err != nil {
		return Container{}, false, err
	}
	core, err := integer(c, protocol.ResourceCore)
	if err != nil {
		return Container{}, false, err
	}
	greedy, err := integer(c, protocol.ResourceCoreGreedy)
	if err != nil {
		return Container{}, false, err
	}
	if _, asks := firstQGPUResource(c); !asks {
		return Container{}, false, nil
	}
	out := Container{Name: c.Name, MemoryGiB: mem, Cards: 1}
	if mem < 1 || mem > MaxMemoryGiB {
		return out, false, invalidf("containers[%s]: %s: value %d must be between 1 and %d GiB", c.Name, protocol.ResourceMemory, mem, MaxMemoryGiB)
	}
	if _, ok := c.Resources.Limits["nvidia.com/gpu"]; ok {
		return out, false, invalidf("containers[%s]: nvidia.com/gpu cannot be combined with qGPU resources", c.Name)
	}
	switch class {
	case protocol.ClassGeneral:
		return generalContainer(c.Name, out, core, greedy)
	case protocol.ClassOnline:
		if core != 0 || greedy != 0 {
			return out, false, invalidf("containers[%s]: online pods ask for %s only, found %s=%d %s=%d",
				c.Name, protocol.ResourceMemory, protocol.ResourceCore, core, protocol.ResourceCoreGreedy, greedy)
		}
		return out, true, nil
	default: // offline
		if core != 0 {
			return out, false, invalidf("containers[%s]: offline pods ask for %s, not %s (value %d)",
				c.Name, protocol.ResourceCoreGreedy, protocol.ResourceCore, core)
		}
		if greedy < 1 || greedy > protocol.CoresPerCard {
			return out, false, invalidf("containers[%s]: %s: value %d must be between 1 and 100 (an offline pod uses at most one card)",
				c.Name, protocol.ResourceCoreGreedy, greedy)
		}
		out.Cores = greedy
		return out, true, nil
	}
}

func generalContainer(name string, out Container, core, greedy int64) (Container, bool, error) {
	if greedy != 0 {
		return out, false, invalidf("containers[%s]: %s: value %d is for offline pods (annotation %s: offline)",
			name, protocol.ResourceCoreGreedy, greedy, protocol.AnnotationAppClass)
	}
	switch {
	case core < 1:
		return out, false, invalidf("containers[%s]: %s: value %d must be between 1 and 99, or a multiple of 100 for whole cards",
			name, protocol.ResourceCore, core)
	case core < protocol.CoresPerCard:
		out.Cores = core
	case core%protocol.CoresPerCard != 0:
		return out, false, invalidf("containers[%s]: %s: value %d above 100 must be a multiple of 100 (whole cards)",
			name, protocol.ResourceCore, core)
	case core/protocol.CoresPerCard > protocol.MaxCards:
		return out, false, invalidf("containers[%s]: %s: value %d asks for more than %d cards", name, protocol.ResourceCore, core, protocol.MaxCards)
	default:
		out.Cores = core
		out.Cards = int(core / protocol.CoresPerCard)
		if out.MemoryGiB%int64(out.Cards) != 0 {
			return out, false, invalidf("containers[%s]: %s: value %d must split evenly over the %d whole cards that %s=%d asks for",
				name, protocol.ResourceMemory, out.MemoryGiB, out.Cards, protocol.ResourceCore, core)
		}
	}
	return out, true, nil
}

// checkPod applies the rules that span containers.
func checkPod(req *Request) error {
	if req.Class == protocol.ClassGeneral {
		return nil
	}
	// Online and offline pods use one card: all their containers share it.
	var mem, cores int64
	for _, c := range req.Containers {
		mem += c.MemoryGiB
		cores += c.Cores
	}
	if mem > MaxMemoryGiB {
		return invalidf("%s pod: %s: total %d GiB over its containers exceeds one card", req.Class, protocol.ResourceMemory, mem)
	}
	if req.Class == protocol.ClassOffline && cores > protocol.CoresPerCard {
		return invalidf("offline pod: %s: total %d over its containers exceeds 100 (an offline pod uses at most one card)",
			protocol.ResourceCoreGreedy, cores)
	}
	return nil
}

// MatchesModel applies the use-gputype and nouse-gputype filters to a card
// model: case-insensitive, substring allowed (as gpu-admission and HAMi do).
func (r *Request) MatchesModel(model string) bool {
	m := strings.ToLower(model)
	for _, no := range r.NoUseTypes {
		if strings.Contains(m, no) {
			return false
		}
	}
	if len(r.UseTypes) == 0 {
		return true
	}
	for _, use := range r.UseTypes {
		if strings.Contains(m, use) {
			return true
		}
	}
	return false
}

// SharesOneCard reports whether all containers must sit on the same card.
func (r *Request) SharesOneCard() bool { return r.Class != protocol.ClassGeneral }
