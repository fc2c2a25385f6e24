package reconcile

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/qgpu-scheduler/qgpu/agent/allocate"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// holder is a (container, resource) as the kubelet reports it.
type holder struct {
	pod       *v1.Pod
	container string
	resource  string
	devices   []string
}

// compareKubelet moves every grant whose devices the kubelet reports on
// another container than the record says: the container got the environment
// of the grant its devices were answered with, so the record follows the
// devices. It happens when two pods with identical requests are admitted in
// another order than the agent matched them (allocate/README.md).
func (r *Reconciler) compareKubelet(ctx context.Context, alive map[string]*v1.Pod, res *Result) error {
	if r.Exclusive != nil {
		r.Exclusive.Lock()
		defer r.Exclusive.Unlock()
	}
	grants, err := r.Store.List()
	if err != nil {
		return err
	}
	holders, err := r.kubeletHolders(ctx, alive, grants)
	if err != nil {
		return err
	}
	var del []string
	var puts []store.Grant
	for _, h := range holders {
		own, hasOwn := ownGrant(grants, h)
		if hasOwn && sameDevices(own.DeviceIDs, h.devices) {
			continue
		}
		// Another pod's record with these devices: the kubelet swapped two
		// containers. Records of the same pod are skipped: the kubelet hands an
		// app container the devices of the init container it reuses.
		g, ok := byDevices(grants, h.resource, h.devices, string(h.pod.UID))
		if !ok && hasOwn {
			continue
		}
		if !ok {
			if g, source, ok := allocate.RecoveredGrant(h.pod, r.Node, h.container, h.resource, h.devices, time.Now()); ok {
				// A lost store: the record is put back, so the card's capacity
				// counts it and its slice is not answered to another pod.
				puts = append(puts, g)
				res.Recovered++
				r.event(h.pod, v1.EventTypeWarning, ReasonGrantRecovered, fmt.Sprintf(
					"container %s holds %d %s devices that the agent had no record of; recorded again from the pod's %s: card(s) %s",
					h.container, len(h.devices), h.resource, source, cards(g)))
				continue
			}
			res.Unknown++
			r.event(h.pod, v1.EventTypeWarning, ReasonUnknownDevices, fmt.Sprintf(
				"container %s holds %d %s devices that the agent has no record of; its grant cannot be reported", h.container, len(h.devices), h.resource))
			continue
		}
		moved := g
		moved.PodUID, moved.Namespace, moved.Name, moved.Container = string(h.pod.UID), h.pod.Namespace, h.pod.Name, h.container
		del, puts = append(del, g.Key()), append(puts, moved)
		res.Moved++
		r.event(h.pod, v1.EventTypeWarning, ReasonGrantMoved, fmt.Sprintf(
			"kubelet gave container %s the %s devices the agent had answered for %s/%s container %s; the grant now records card(s) %s",
			h.container, h.resource, g.Namespace, g.Name, g.Container, cards(g)))
	}
	if len(puts) == 0 {
		return nil
	}
	return r.Store.Replace(del, puts)
}

// kubeletHolders are the (container, resource) device sets the kubelet
// lists on the alive pods whose devices are all the container's own
// (allocate.OwnDevice). A set with any device that may not be (an old
// pod's of the same name, or not recorded while the container has not
// started) is left out whole, not judged by the rest: the rest could match
// another pod's record exactly and move it onto a container that asked for
// something else (a chaos run saw a 1 GiB record moved onto a 3 GiB
// container whose other two devices were not yet recorded). It is judged
// again on a later pass, once its devices are recorded or it has started.
func (r *Reconciler) kubeletHolders(ctx context.Context, alive map[string]*v1.Pod, grants []store.Grant) ([]holder, error) {
	list, err := r.PodResources.List(ctx)
	if err != nil {
		return nil, err
	}
	recorded := map[string]store.Grant{}
	for _, g := range grants {
		for _, id := range g.DeviceIDs {
			recorded[g.KubeletResource()+"/"+id] = g
		}
	}
	byName := map[string]*v1.Pod{}
	for _, p := range alive {
		byName[p.Namespace+"/"+p.Name] = p
	}
	var out []holder
	for _, pr := range list {
		pod := byName[pr.Namespace+"/"+pr.Name]
		if pod == nil {
			continue
		}
		for _, c := range pr.Containers {
			for _, h := range containerHolders(pod, c) {
				own := !slices.ContainsFunc(h.devices, func(id string) bool {
					g, ok := recorded[h.resource+"/"+id]
					return !allocate.OwnDevice(pod, h.container, g, ok)
				})
				if own {
					out = append(out, h)
				}
			}
		}
	}
	return out, nil
}

// containerHolders merges the container's devices per resource: the kubelet
// reports one ContainerDevices entry per device ID (per NUMA node, even), not
// one per resource.
func containerHolders(pod *v1.Pod, c *podresourcesapi.ContainerResources) []holder {
	var out []holder
	index := map[string]int{}
	for _, d := range c.Devices {
		if !slices.Contains(protocol.Resources[:], d.ResourceName) || len(d.DeviceIds) == 0 {
			continue
		}
		i, ok := index[d.ResourceName]
		if !ok {
			i, index[d.ResourceName] = len(out), len(out)
			out = append(out, holder{pod: pod, container: c.Name, resource: d.ResourceName})
		}
		for _, id := range d.DeviceIds {
			if !slices.Contains(out[i].devices, id) {
				out[i].devices = append(out[i].devices, id)
			}
		}
	}
	return out
}

func ownGrant(grants []store.Grant, h holder) (store.Grant, bool) {
	key := store.Key(string(h.pod.UID), h.container, h.resource)
	for _, g := range grants {
		if g.Key() == key {
			return g, true
		}
	}
	return store.Grant{}, false
}

// byDevices returns the grant of resource with exactly ids, held by a pod other than exceptUID.
func byDevices(grants []store.Grant, resource string, ids []string, exceptUID string) (store.Grant, bool) {
	for _, g := range grants {
		if g.Resource == resource && g.PodUID != exceptUID && sameDevices(g.DeviceIDs, ids) {
			return g, true
		}
	}
	return store.Grant{}, false
}

func sameDevices(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

func cards(g store.Grant) string {
	s := ""
	for i, sl := range g.Slices {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("%d (%s)", sl.Index, sl.UUID)
	}
	return s
}
