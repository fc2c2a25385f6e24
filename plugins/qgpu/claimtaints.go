package qgpu

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Device taints (the DRADeviceTaints feature gate): the agent publishes an
// unhealthy card's device with the NoSchedule taint gpu.qgpu.io/unhealthy
// (docs/dra.md#card-health). As upstream's allocator does
// (k8s.io/dynamic-resource-allocation/structured, taintPreventsAllocation),
// a device with a NoSchedule or NoExecute taint that the claim's request
// does not tolerate takes no new allocation; other effects (None) do not
// count. A claim already allocated there is not moved (joining pods keep
// it). The node's inventory says the same for an unhealthy card (the
// ledger refuses it), so a taint matters on its own only for the moment
// the two disagree, or for a taint put there by other means.

// untoleratedCards are, by node, the indexes of the cards whose device
// carries a taint that some claim of req does not tolerate; nil when none.
// It reads the informers' caches only.
func (c *claimAccess) untoleratedCards(req *request.Request) (map[string][]int, error) {
	all, err := c.slices.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var tolerations [][]resourceapi.DeviceToleration // one list per claim
	var out map[string][]int
	for _, s := range all {
		if s.Spec.Driver != protocol.DRADriver || s.Spec.NodeName == nil || s.Spec.Pool.Name != *s.Spec.NodeName {
			continue
		}
		for _, d := range s.Spec.Devices {
			if len(d.Taints) == 0 {
				continue
			}
			if tolerations == nil {
				tolerations = c.tolerations(req)
			}
			index, ok := protocol.DRADeviceIndex(d.Name)
			if ok && !tolerated(d.Taints, tolerations) {
				if out == nil {
					out = map[string][]int{}
				}
				out[*s.Spec.NodeName] = append(out[*s.Spec.NodeName], index)
			}
		}
	}
	return out, nil
}

// tolerations are each claim's request's tolerations (a claim gone from
// the cache since PreFilter read it tolerates nothing).
func (c *claimAccess) tolerations(req *request.Request) [][]resourceapi.DeviceToleration {
	out := make([][]resourceapi.DeviceToleration, 0, len(req.Claims))
	for _, ref := range req.Claims {
		var list []resourceapi.DeviceToleration
		if claim, err := c.get(ref.Namespace, ref.Name); err == nil && claim != nil {
			list = requestTolerations(claim, ref.Request)
		}
		out = append(out, list)
	}
	return out
}

// requestTolerations are the tolerations of the claim's request name
// (exactly one device; a qGPU claim has no firstAvailable subrequests).
func requestTolerations(claim *resourceapi.ResourceClaim, name string) []resourceapi.DeviceToleration {
	for _, r := range claim.Spec.Devices.Requests {
		if r.Name == name && r.Exactly != nil {
			return r.Exactly.Tolerations
		}
	}
	return nil
}

// tolerated reports whether every claim tolerates every taint of the
// device that keeps new allocations off it.
func tolerated(taints []resourceapi.DeviceTaint, claims [][]resourceapi.DeviceToleration) bool {
	for _, taint := range taints {
		if taint.Effect != resourceapi.DeviceTaintEffectNoSchedule && taint.Effect != resourceapi.DeviceTaintEffectNoExecute {
			continue
		}
		for _, tolerations := range claims {
			if !toleratesTaint(tolerations, taint) {
				return false
			}
		}
	}
	return true
}

func toleratesTaint(tolerations []resourceapi.DeviceToleration, taint resourceapi.DeviceTaint) bool {
	for _, t := range tolerations {
		if resourceclaim.ToleratesTaint(t, taint) {
			return true
		}
	}
	return false
}

// refuseUntolerated marks the cards of the node this cycle's claims may
// not take as unhealthy, on a copy of the node's cards: placement then
// passes them by as it does an unhealthy card.
func (s *cycleState) refuseUntolerated(node string, cards []ledger.Card) {
	for _, index := range s.untolerated[node] {
		for i := range cards {
			if cards[i].Index == index {
				cards[i].Healthy = false
			}
		}
	}
}
