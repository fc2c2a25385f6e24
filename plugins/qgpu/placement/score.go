package placement

import (
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// MaxScore matches the scheduler framework's MaxNodeScore.
const MaxScore = 100

// NodeScore scores a node from its cards after the pod was placed (Place has
// already added the pod to cards): binpack prefers the fullest node, spread the
// emptiest. Online pods prefer nodes where their card has no offline pods, and
// offline pods nodes where their card has no online pods (seed 000), so the
// class preference holds across nodes, not only across the cards of one.
func NodeScore(cards []ledger.Card, req *request.Request, policy Policy, choices []Choice) int64 {
	var used, total int64
	for i := range cards {
		c := &cards[i]
		if !c.Healthy {
			continue
		}
		total += c.MemoryGiB*protocol.CoresPerCard + c.MemoryGiB*protocol.CoresPerCard
		used += c.UsedMemoryGiB*protocol.CoresPerCard + c.MemoryGiB*max(c.UsedCores, c.UsedGreedy)
	}
	if total == 0 {
		return 0
	}
	fill := used * MaxScore / total
	switch req.Class {
	case protocol.ClassOnline:
		// Spread, and a bonus when the chosen card has no offline pod.
		s := (MaxScore - fill) / 2
		if len(choices) > 0 && cards[choices[0].Card].Offline == 0 {
			s += MaxScore / 2
		}
		return s
	case protocol.ClassOffline:
		s := fill / 2
		if len(choices) > 0 && cards[choices[0].Card].Online == 0 {
			s += MaxScore / 2
		}
		return s
	}
	if policy == Spread {
		return MaxScore - fill
	}
	return fill
}
