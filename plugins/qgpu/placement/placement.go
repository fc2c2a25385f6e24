// Package placement chooses cards for a pod and scores nodes, as pure
// functions over ledger cards. The scheduler plugin and the trace replay call
// the very same functions.
package placement

import (
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Choice is one container's card: Container indexes Request.Containers and
// Card indexes the cards slice passed in.
type Choice struct {
	Container int
	Card      int
}

// Reasons Filter reports: constant strings, so the scheduler aggregates them.
const (
	ReasonNoCards     = "node has no qGPU cards"
	ReasonNotMixed    = "node is not enabled for online/offline pods (label mixed-qgpu-enable=enable)"
	ReasonNoModel     = "no card of the requested GPU model (use-gputype/nouse-gputype)"
	ReasonCardsFull   = "insufficient qGPU card memory, cores or pod slots"
	ReasonWholeCards  = "not enough whole free qGPU cards"
	ReasonClassOnCard = "cards are held by pods of another class"
)

// Place chooses a card for every container of req. cards is scratch: Place
// adds the pod's holdings to it as it goes, so the caller passes a copy. The
// choices are appended to out (pass a reused buffer to avoid allocation). On
// failure it returns one of the Reason constants.
func Place(cards []ledger.Card, mixed bool, req *request.Request, policy Policy, out []Choice) ([]Choice, string) {
	return PlaceIn(cards, mixed, req, policy, nil, out)
}

// PlaceIn is Place for policies that look beyond the cards (fgd: the
// workload and the node's CPU). env may be nil for the others.
func PlaceIn(cards []ledger.Card, mixed bool, req *request.Request, policy Policy, env *Env, out []Choice) ([]Choice, string) {
	if req.CPUOnly() {
		return out, "" // no card to take: a node without cards fits too
	}
	if reason := Unfit(cards, mixed, req); reason != "" {
		return out, reason
	}
	if req.SharesOneCard() {
		return placeOneCard(cards, req, out)
	}
	return placeGeneral(cards, req, policy, env, out)
}

// Unfit is the reason the node can take no card for req at all, or "",
// found without reading the cards beyond their models: Filter asks it before
// it copies the cards for PlaceIn.
func Unfit(cards []ledger.Card, mixed bool, req *request.Request) string {
	switch {
	case len(cards) == 0:
		return ReasonNoCards
	case req.Class != protocol.ClassGeneral && !mixed:
		return ReasonNotMixed
	case !anyModel(cards, req):
		return ReasonNoModel
	}
	return ""
}

func anyModel(cards []ledger.Card, req *request.Request) bool {
	for i := range cards {
		if req.MatchesModel(cards[i].Model) {
			return true
		}
	}
	return false
}

// placeOneCard puts all containers of an online or offline pod on one card.
// As Tencent qGPU's co-location scheduler: online pods prefer cards without
// offline pods, then spread; offline pods prefer cards without online pods,
// then bin-pack.
func placeOneCard(cards []ledger.Card, req *request.Request, out []Choice) ([]Choice, string) {
	best, mem, cores := chooseOneCard(cards, req)
	if best < 0 {
		return out, failReason(cards, req)
	}
	cards[best].Take(req.Class, mem, cores, true)
	for ci := range req.Containers {
		out = append(out, Choice{Container: ci, Card: best})
	}
	return out, ""
}

// chooseOneCard is placeOneCard's choice (-1 if none) and the pod's totals.
func chooseOneCard(cards []ledger.Card, req *request.Request) (best int, mem, cores int64) {
	for _, c := range req.Containers {
		mem += c.MemoryGiB
		cores += c.Cores
	}
	best, bestKey := -1, int64(0)
	for i := range cards {
		c := &cards[i]
		if !req.MatchesModel(c.Model) || !c.Fits(req.Class, mem, cores, true) {
			continue
		}
		free := c.FreeMemoryGiB() - mem
		var key int64
		if req.Class == protocol.ClassOnline {
			key = free // spread: most free memory left
			if c.Offline == 0 {
				key += 1 << 40
			}
		} else {
			key = -free // bin-pack: least free memory left
			if c.Online == 0 {
				key += 1 << 40
			}
		}
		if best < 0 || key > bestKey {
			best, bestKey = i, key
		}
	}
	return best, mem, cores
}

// failReason tells apart the common reasons a pod does not fit, for events.
func failReason(cards []ledger.Card, req *request.Request) string {
	other := true
	for i := range cards {
		c := &cards[i]
		if !req.MatchesModel(c.Model) {
			continue
		}
		if req.Class == protocol.ClassGeneral && c.Online+c.Offline == 0 || req.Class != protocol.ClassGeneral && c.General == 0 {
			other = false
		}
	}
	if other {
		return ReasonClassOnCard
	}
	return ReasonCardsFull
}

// Slices turns choices into the assignment's per-container slices.
func Slices(cards []ledger.Card, req *request.Request, choices []Choice) []protocol.ContainerAssignment {
	out := make([]protocol.ContainerAssignment, len(req.Containers))
	for i, c := range req.Containers {
		out[i].Name = c.Name
	}
	for _, ch := range choices {
		c := req.Containers[ch.Container]
		card := cards[ch.Card]
		out[ch.Container].Slices = append(out[ch.Container].Slices, protocol.Slice{
			Index: card.Index, UUID: card.UUID, MemoryGiB: c.PerCardMemoryGiB(), Cores: c.PerCardCores(),
		})
	}
	return out
}
