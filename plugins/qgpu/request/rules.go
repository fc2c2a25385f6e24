package request

import (
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// parseContainer applies the per-class rules of
// docs/design.md#what-a-pod-asks-for to one container.
// ok is false for a container that asks for no qGPU resource. A resource that
// a class does not use is rejected when it is present at all, even as 0.
func parseContainer(class protocol.Class, c *v1.Container) (Container, bool, error) {
	mem, hasMem, err := integer(c, protocol.ResourceMemory)
	if err != nil {
		return Container{}, false, err
	}
	core, hasCore, err := integer(c, protocol.ResourceCore)
	if err != nil {
		return Container{}, false, err
	}
	greedy, hasGreedy, err := integer(c, protocol.ResourceCoreGreedy)
	if err != nil {
		return Container{}, false, err
	}
	if !hasMem && !hasCore && !hasGreedy {
		return Container{}, false, nil
	}
	out := Container{Name: c.Name, MemoryGiB: mem, Cards: 1}
	if !hasMem {
		return out, false, invalidf("containers[%s]: %s: missing: every container that asks for qGPU asks for memory (1 to %d GiB)",
			c.Name, protocol.ResourceMemory, MaxMemoryGiB)
	}
	if mem < 1 || mem > MaxMemoryGiB {
		return out, false, invalidf("containers[%s]: %s: value %d must be between 1 and %d GiB", c.Name, protocol.ResourceMemory, mem, MaxMemoryGiB)
	}
	switch class {
	case protocol.ClassGeneral:
		if hasGreedy {
			return out, false, invalidf("containers[%s]: %s: value %d is for offline pods (annotation %s: offline)",
				c.Name, protocol.ResourceCoreGreedy, greedy, protocol.AnnotationAppClass)
		}
		return generalContainer(c.Name, out, core)
	case protocol.ClassOnline:
		if hasCore {
			return out, false, invalidf("containers[%s]: %s: value %d: online pods ask for %s only",
				c.Name, protocol.ResourceCore, core, protocol.ResourceMemory)
		}
		if hasGreedy {
			return out, false, invalidf("containers[%s]: %s: value %d: online pods ask for %s only",
				c.Name, protocol.ResourceCoreGreedy, greedy, protocol.ResourceMemory)
		}
		return out, true, nil
	default: // offline
		if hasCore {
			return out, false, invalidf("containers[%s]: %s: value %d: offline pods ask for %s, not %s",
				c.Name, protocol.ResourceCore, core, protocol.ResourceCoreGreedy, protocol.ResourceCore)
		}
		if greedy < 1 || greedy > protocol.CoresPerCard {
			return out, false, invalidf("containers[%s]: %s: value %d must be between 1 and 100 (an offline pod uses at most one card)",
				c.Name, protocol.ResourceCoreGreedy, greedy)
		}
		out.Cores = greedy
		return out, true, nil
	}
}

func generalContainer(name string, out Container, core int64) (Container, bool, error) {
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
		out.Whole = true
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
// It allocates nothing for ASCII model names: Filter and Score call it per card.
func (r *Request) MatchesModel(model string) bool {
	if len(r.NoUseTypes) == 0 && len(r.UseTypes) == 0 {
		return true
	}
	for _, no := range r.NoUseTypes {
		if containsFold(model, no) {
			return false
		}
	}
	if len(r.UseTypes) == 0 {
		return true
	}
	for _, use := range r.UseTypes {
		if containsFold(model, use) {
			return true
		}
	}
	return false
}

// containsFold reports whether s contains the lower-case sub, ignoring case.
func containsFold(s, sub string) bool {
	if !isASCII(s) || !isASCII(sub) {
		return strings.Contains(strings.ToLower(s), sub)
	}
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// SharesOneCard reports whether all containers must sit on the same card.
func (r *Request) SharesOneCard() bool { return r.Class != protocol.ClassGeneral }

// CPUOnly reports whether the request takes no card: a general pod without
// qGPU containers, which fits any node's cards (the fragmentation-aware
// policies still place it, by what its CPU strands).
func (r *Request) CPUOnly() bool {
	return r.Class == protocol.ClassGeneral && !r.NodeExclusive && len(r.Containers) == 0
}
