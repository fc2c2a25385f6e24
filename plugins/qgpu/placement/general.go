package placement

import (
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// placeGeneral places each container of a general pod on its own choice of
// card (several containers may share one), following the card policy.
// Whole-card containers (C = 100·k) take k empty cards.
func placeGeneral(cards []ledger.Card, req *request.Request, policy Policy, env *Env, out []Choice) ([]Choice, string) {
	start := len(out)
	for ci, c := range req.Containers {
		if c.Whole {
			var reason string
			if out, reason = placeWhole(cards, req, ci, policy, out); reason != "" {
				return out[:start], reason
			}
			continue
		}
		var best int
		if (policy == FGD || policy == FragFit && env.fragFit().FGDCard) && env.hasWorkload() {
			best = fgdCard(cards, req, c, env, out[start:])
		} else {
			best = bestShared(cards, req, c, policy, out[start:])
		}
		if best < 0 {
			return out[:start], failReason(cards, req)
		}
		cards[best].Take(protocol.ClassGeneral, c.MemoryGiB, c.Cores, !holds(out[start:], best))
		out = append(out, Choice{Container: ci, Card: best})
	}
	return out, ""
}

// holds reports whether an earlier container of this pod sits on the card.
func holds(choices []Choice, card int) bool {
	for _, ch := range choices {
		if ch.Card == card {
			return true
		}
	}
	return false
}

func bestShared(cards []ledger.Card, req *request.Request, c request.Container, policy Policy, chosen []Choice) int {
	best, bestFree := -1, int64(0)
	for i := range cards {
		card := &cards[i]
		if !req.MatchesModel(card.Model) || !card.Fits(protocol.ClassGeneral, c.MemoryGiB, c.Cores, !holds(chosen, i)) {
			continue
		}
		free := freeAfter(card, c)
		better := free < bestFree // binpack: least left over
		if policy == Spread {
			better = free > bestFree
		}
		if best < 0 || better {
			best, bestFree = i, free
		}
	}
	return best
}

// freeAfter is the capacity a card has left after the container, memory
// and cores weighed alike as fractions of the card (per-mille, integers only).
func freeAfter(card *ledger.Card, c request.Container) int64 {
	return (card.FreeMemoryGiB()-c.MemoryGiB)*1000/max(card.MemoryGiB, 1) +
		(protocol.CoresPerCard-card.UsedCores-c.Cores)*10
}

// fgdCard is the card FGD itself prefers, as the paper's simulator takes it
// (test/replay/sim/ports.go, shareCard): the first card with the best
// truncated FGD score of the node after the container. fragfit takes the
// tightest card instead (bestShared), as the simulator's other policies do.
func fgdCard(cards []ledger.Card, req *request.Request, c request.Container, env *Env, chosen []Choice) int {
	before := fragBefore(cards, env) // the node before the pod
	if len(chosen) > 0 {
		before = envFrag(cards, env, env.CPULeft) // ...and its earlier containers
	}
	best, bestScore := -1, int64(0)
	for i := range cards {
		card := &cards[i]
		newPod := !holds(chosen, i)
		if !req.MatchesModel(card.Model) || !card.Fits(protocol.ClassGeneral, c.MemoryGiB, c.Cores, newPod) {
			continue
		}
		saved := *card
		card.Take(protocol.ClassGeneral, c.MemoryGiB, c.Cores, newPod)
		score := fgdScore(before, envFrag(cards, env, env.cpuLeftAfter()))
		*card = saved
		if best < 0 || score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// placeWhole takes k empty cards for one container. binpack takes the lowest
// indexes (keeping the rest contiguous), spread the same: empty cards are alike.
func placeWhole(cards []ledger.Card, req *request.Request, ci int, _ Policy, out []Choice) ([]Choice, string) {
	c := req.Containers[ci]
	need := c.Cards
	start := len(out)
	for i := range cards {
		if need == 0 {
			break
		}
		if takesWhole(&cards[i], req, c) {
			out = append(out, Choice{Container: ci, Card: i})
			need--
		}
	}
	if need > 0 {
		return out[:start], ReasonWholeCards
	}
	for _, ch := range out[start:] {
		cards[ch.Card].Take(protocol.ClassGeneral, c.PerCardMemoryGiB(), protocol.CoresPerCard, true)
	}
	return out, ""
}

// takesWhole reports whether the whole-card container c can take card.
func takesWhole(card *ledger.Card, req *request.Request, c request.Container) bool {
	return card.Empty() && req.MatchesModel(card.Model) &&
		card.Fits(protocol.ClassGeneral, c.PerCardMemoryGiB(), protocol.CoresPerCard, true)
}
