package placement

import (
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// placeGeneral places each container of a general pod on its own choice of
// card (several containers may share one), following the card policy.
// Whole-card containers (C = 100·k) take k empty cards.
func placeGeneral(cards []ledger.Card, req *request.Request, policy Policy, out []Choice) ([]Choice, string) {
	start := len(out)
	for ci, c := range req.Containers {
		if c.Whole {
			var reason string
			if out, reason = placeWhole(cards, req, ci, policy, out); reason != "" {
				return out[:start], reason
			}
			continue
		}
		best := bestShared(cards, req, c, policy, out[start:])
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
		// Free capacity left after placing, memory and cores weighed alike as
		// fractions of the card (in per-mille, integers only).
		free := (card.FreeMemoryGiB()-c.MemoryGiB)*1000/max(card.MemoryGiB, 1) +
			(protocol.CoresPerCard-card.UsedCores-c.Cores)*10
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

// placeWhole takes k empty cards for one container. binpack takes the lowest
// indexes (keeping the rest contiguous), spread the same: empty cards are alike.
func placeWhole(cards []ledger.Card, req *request.Request, ci int, _ Policy, out []Choice) ([]Choice, string) {
	c := req.Containers[ci]
	need, per := c.Cards, c.PerCardMemoryGiB()
	start := len(out)
	for i := range cards {
		card := &cards[i]
		if need == 0 {
			break
		}
		if !card.Empty() || !req.MatchesModel(card.Model) || !card.Fits(protocol.ClassGeneral, per, protocol.CoresPerCard, true) {
			continue
		}
		out = append(out, Choice{Container: ci, Card: i})
		need--
	}
	if need > 0 {
		return out[:start], ReasonWholeCards
	}
	for _, ch := range out[start:] {
		cards[ch.Card].Take(protocol.ClassGeneral, per, protocol.CoresPerCard, true)
	}
	return out, ""
}
