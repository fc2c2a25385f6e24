package view

import (
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

// heldClaim is an allocated ResourceClaim of the qGPU driver.
type heldClaim struct {
	key  string // namespace/name
	uid  types.UID
	hold protocol.ClaimHold
}

// AddClaims counts what the allocated ResourceClaims of the qGPU driver
// hold, as the scheduler's ledger does (docs/ledger.md#claims): a claim's
// slices are its consumer's while a pod placed with them holds them, and
// the claim's own from then until the allocation is cleared (a pod that
// joined the claim, or none yet). Claims of other drivers are skipped.
func (c *Cluster) AddClaims(claims []resourceapi.ResourceClaim) {
	for i := range claims {
		cl := &claims[i]
		hold, ok := protocol.HeldByClaim(cl)
		if !ok {
			continue
		}
		h := ledger.Holding{Node: hold.Node, Class: hold.Class, Namespace: cl.Namespace, Slices: hold.Slices}
		consumers := make([]types.UID, 0, len(cl.Status.ReservedFor))
		for _, r := range cl.Status.ReservedFor {
			consumers = append(consumers, r.UID)
		}
		c.ledger.SetClaim(cl.UID, h, consumers)
		c.granted.SetClaim(cl.UID, h, consumers)
		c.claims = append(c.claims, heldClaim{key: cl.Namespace + "/" + cl.Name, uid: cl.UID, hold: hold})
	}
	if len(c.claims) > 0 {
		c.snapshot()
	}
}

// claimHolders adds, per card of node, the claims that count their slices
// themselves ("claim <namespace>/<name>").
func (c *Cluster) claimHolders(node string, holders map[int][]string) {
	for _, hc := range c.claims {
		if _, counted, ok := c.ledger.ClaimHolding(hc.uid); !ok || !counted || hc.hold.Node != node {
			continue
		}
		for _, s := range hc.hold.Slices {
			holders[s.Index] = append(holders[s.Index], "claim "+hc.key)
		}
	}
}

// claimNames maps the ResourceClaim objects a pod's containers use to the
// container using each (docs/dra.md: one container per qGPU claim).
func claimNames(pod *v1.Pod) map[string]string {
	objects := map[string]string{} // pod claim name → ResourceClaim name
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			objects[pc.Name] = *pc.ResourceClaimName
		}
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			objects[st.Name] = *st.ResourceClaimName
		}
	}
	out := map[string]string{}
	for _, c := range pod.Spec.Containers {
		for _, rc := range c.Resources.Claims {
			if name, ok := objects[rc.Name]; ok {
				out[name] = c.Name
			}
		}
	}
	return out
}

// CheckClaims compares the pods that asked through ResourceClaims with
// their claims (claims: every ResourceClaim of the cluster): each bound
// claimed pod's claims of driver gpu.qgpu.io must be allocated, reserved for
// it, and name the card, memory and cores of its assignment
// (ClaimMismatch); a claim allocated for a pod that is bound elsewhere, or
// gone, is left to the resource-claim controller and not counted.
func (c *Cluster) CheckClaims(claims []resourceapi.ResourceClaim) []Violation {
	byName := map[string]*resourceapi.ResourceClaim{}
	for i := range claims {
		byName[claims[i].Namespace+"/"+claims[i].Name] = &claims[i]
	}
	var out []Violation
	for _, p := range c.Pods {
		if !p.Claimed || p.Node == "" || p.Assignment == nil || p.Phase == v1.PodSucceeded || p.Phase == v1.PodFailed {
			continue
		}
		names := make([]string, 0, len(p.claims))
		for name := range p.claims {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			claim := byName[p.Namespace+"/"+name]
			if claim == nil {
				continue // the pod's claims of other drivers, or one deleted under it
			}
			if d := claimProblem(claim, p, p.claims[name]); d != "" {
				out = append(out, Violation{"ClaimMismatch", p.Key(), fmt.Sprintf("ResourceClaim %s: %s", name, d)})
			}
		}
	}
	return out
}

// claimProblem is why claim disagrees with pod's assignment for container;
// "" when it agrees or is no qGPU claim.
func claimProblem(claim *resourceapi.ResourceClaim, p Pod, container string) string {
	var slice *protocol.Slice
	for _, ca := range p.Assignment.Containers {
		if ca.Name == container && len(ca.Slices) == 1 {
			slice = &ca.Slices[0]
		}
	}
	if claim.Status.Allocation == nil {
		if slice == nil {
			return ""
		}
		return "not allocated, while the pod is bound with a slice of card " + fmt.Sprint(slice.Index)
	}
	var results []resourceapi.DeviceRequestAllocationResult
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == protocol.DRADriver {
			results = append(results, r)
		}
	}
	switch {
	case len(results) == 0:
		return ""
	case slice == nil:
		return "allocated, but the pod's assignment gives container " + container + " no slice"
	case len(results) != 1:
		return fmt.Sprintf("%d devices allocated, want one", len(results))
	case !reservedFor(claim, p.UID):
		return "not reserved for the pod"
	}
	r := results[0]
	mem, cores := r.ConsumedCapacity[protocol.DRACapacityMemory], r.ConsumedCapacity[protocol.DRACapacityCores]
	if r.Pool != p.Node || r.Device != protocol.DRADeviceName(slice.Index) || mem.Value() != slice.MemoryGiB<<30 || cores.Value() != slice.Cores {
		return fmt.Sprintf("allocated %s/%s (memory %s, cores %s), assigned card %d of %s with %d GiB and %d cores",
			r.Pool, r.Device, mem.String(), cores.String(), slice.Index, p.Node, slice.MemoryGiB, slice.Cores)
	}
	return ""
}

func reservedFor(claim *resourceapi.ResourceClaim, uid types.UID) bool {
	for _, r := range claim.Status.ReservedFor {
		if r.UID == uid {
			return true
		}
	}
	return false
}
