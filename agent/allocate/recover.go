package allocate

import (
	"context"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// recoverServed puts back the record of every (container, resource) the
// kubelet lists as holding devices but the store does not have (a lost or
// replaced --dbfile): without it, the running container would look
// ungranted, its slice would be answered to the next container of the same
// size, and the card's capacity check would not count it. The record holds
// what the container got: the pod's qgpu.io/grant annotation (what the agent
// answered) when it names the container, else its assignment; its device
// IDs are the ones the kubelet lists. Devices already recorded under
// another container are left to the reconciler, which moves records to the
// container the kubelet names. It returns grants with the recovered ones.
func (a *Allocator) recoverServed(ctx context.Context, view *kubeletView, pods []*v1.Pod, grants []store.Grant) []store.Grant {
	if view == nil {
		return grants
	}
	have := make(map[string]bool, len(grants))
	recorded := map[string]bool{} // resource/device ID
	for _, g := range grants {
		have[g.Key()] = true
		for _, id := range g.DeviceIDs {
			recorded[g.Resource+"/"+id] = true
		}
	}
	for _, p := range pods {
		if p.Spec.NodeName != a.Node || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed || !view.pods[p.Namespace+"/"+p.Name] {
			continue
		}
		for _, g := range a.lostGrants(p, view, have, recorded) {
			if err := a.Store.Put(g); err != nil {
				klog.FromContext(ctx).Error(err, "Recovering a grant the store had lost", "pod", klog.KObj(p), "container", g.Container, "resource", g.Resource)
				continue
			}
			klog.FromContext(ctx).Info("Recovered a grant the store had lost from the kubelet's record", "pod", klog.KObj(p),
				"container", g.Container, "resource", g.Resource, "cards", cardsOf(g.Slices))
			have[g.Key()] = true
			grants = append(grants, g)
		}
	}
	return grants
}

// lostGrants are the pod's (container, resource) pairs the kubelet holds
// devices for and the store has no record of.
func (a *Allocator) lostGrants(p *v1.Pod, view *kubeletView, have, recorded map[string]bool) []store.Grant {
	assignment, err := AssignmentOf(p, a.Node)
	if err != nil {
		return nil
	}
	granted, _ := GrantOf(p)
	var out []store.Grant
	for _, c := range containerOrder(p, assignment) {
		for _, r := range protocol.Resources {
			ids := view.holds(p.Namespace, p.Name, c.Name, r)
			amount := Amount(assignment.Class, c, r)
			if amount == 0 || len(ids) == 0 || have[store.Key(string(p.UID), c.Name, r)] ||
				slices.ContainsFunc(ids, func(id string) bool { return recorded[r+"/"+id] }) {
				continue
			}
			cand := &Candidate{Pod: p, Assignment: assignment, Container: c}
			if got := grantedContainer(granted, string(p.UID), c.Name); got != nil {
				cand.Container = *got
			}
			out = append(out, a.grantOf(cand, r, ids))
		}
	}
	return out
}

// grantedContainer is the container's entry in the pod's grant annotation,
// if the annotation is the agent's for this pod.
func grantedContainer(g *protocol.Assignment, podUID, name string) *protocol.ContainerAssignment {
	if g == nil || g.PodUID != podUID {
		return nil
	}
	for i := range g.Containers {
		if g.Containers[i].Name == name {
			return &g.Containers[i]
		}
	}
	return nil
}
