package allocate

import (
	"context"
	"slices"
	"time"

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
	var recovered []string        // pod UIDs
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
			recovered = append(recovered, string(p.UID))
		}
	}
	for _, uid := range slices.Compact(recovered) {
		a.notifyIfUnannotated(ctx, uid)
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
	var out []store.Grant
	for _, c := range containerOrder(p, assignment) {
		for _, r := range protocol.Resources {
			ids := view.holds(p, c.Name, r)
			if len(ids) == 0 || have[store.Key(string(p.UID), c.Name, r)] ||
				slices.ContainsFunc(ids, func(id string) bool { return recorded[r+"/"+id] }) {
				continue
			}
			if g, _, ok := RecoveredGrant(p, a.Node, c.Name, r, ids, a.now()); ok {
				out = append(out, g)
			}
		}
	}
	return out
}

// RecoveredGrant rebuilds the record of what container holds of resource,
// for a container the kubelet lists with devices the store has no record
// of: the pod's qgpu.io/grant annotation (what the agent answered) when it
// names the container, else its assignment, with the kubelet's device IDs.
// It says which source it used; false when the pod's assignment gives the
// container none of the resource (nothing the agent can have answered).
func RecoveredGrant(pod *v1.Pod, node, container, resource string, devices []string, now time.Time) (store.Grant, string, bool) {
	assignment, err := AssignmentOf(pod, node)
	if err != nil {
		return store.Grant{}, "", false
	}
	i := slices.IndexFunc(assignment.Containers, func(c protocol.ContainerAssignment) bool { return c.Name == container })
	if i < 0 || Amount(assignment.Class, assignment.Containers[i], resource) == 0 {
		return store.Grant{}, "", false
	}
	cand, source := &Candidate{Pod: pod, Assignment: assignment, Container: assignment.Containers[i]}, "assignment"
	granted, _ := GrantOf(pod)
	if got := grantedContainer(granted, string(pod.UID), container); got != nil {
		cand.Container, source = *got, "grant annotation"
	}
	g := grantFor(cand, resource, devices, now)
	return g, source, true
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
