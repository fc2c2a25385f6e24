package allocate

import (
	"context"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/qgpu-scheduler/qgpu/agent/podresources"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

// ErrKubeletUnanswered is wrapped when the kubelet's PodResources API is
// there but did not answer (README: "When the kubelet does not answer"):
// the call is refused rather than matched by order alone.
var ErrKubeletUnanswered = errors.New("kubelet's PodResources List did not answer")

// kubeletView is the kubelet's PodResources List at the time of one call:
// the pods it has taken in, and the device IDs each of their containers
// holds per resource. A container that holds devices of a resource has been
// answered for it (the kubelet records the devices only after the answer),
// whatever the store says. Init containers that run to completion are not
// listed by the kubelet: for them the store alone says "served".
//
// The kubelet names pods by namespace/name, not UID: while the old pod of a
// name is still listed, its devices appear under the name of the new one.
// Devices the store records under another pod of the same name are that
// pod's (holds).
type kubeletView struct {
	pods  map[string]bool     // namespace/name
	held  map[string][]string // namespace/name/container/resource → device IDs
	owner map[string]string   // resource/device ID → namespace/name/container listed holding it
	// recorded: resource/device ID → the grant whose record names it, by
	// the resource the kubelet lists it under.
	recorded map[string]store.Grant
}

// askKubelet lists the kubelet's pods, repeating a transient refusal
// (podresources.Retrying). It returns nil, and the store alone says what is
// served, only when there is no Kubelet or its API is absent on this node
// (no socket, List not implemented); any other failure is an error that
// refuses the call: matching without the kubelet's list can answer one
// container with another's slice.
func (a *Allocator) askKubelet(ctx context.Context, grants []store.Grant) (*kubeletView, error) {
	if a.Kubelet == nil {
		return nil, nil
	}
	list, err := podresources.Retrying{Lister: a.Kubelet, Backoff: a.KubeletBackoff}.List(ctx)
	switch {
	case err == nil:
		return newKubeletView(list, grants), nil
	case podresources.Absent(err):
		klog.FromContext(ctx).Info("Kubelet's PodResources API absent, matching by order and the store alone", "err", err)
		return nil, nil
	}
	return nil, fmt.Errorf("%w: %v; refusing rather than guess which container the call is for (the kubelet retries)", ErrKubeletUnanswered, err)
}

func newKubeletView(list []*podresourcesapi.PodResources, grants []store.Grant) *kubeletView {
	v := &kubeletView{pods: make(map[string]bool, len(list)), held: map[string][]string{},
		owner: map[string]string{}, recorded: make(map[string]store.Grant, len(grants))}
	for _, p := range list {
		pod := p.GetNamespace() + "/" + p.GetName()
		v.pods[pod] = true
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				holder := pod + "/" + c.GetName()
				key := holder + "/" + d.GetResourceName()
				for _, id := range d.GetDeviceIds() {
					if !slices.Contains(v.held[key], id) {
						v.held[key] = append(v.held[key], id)
					}
					v.owner[d.GetResourceName()+"/"+id] = holder
				}
			}
		}
	}
	for _, g := range grants {
		for _, id := range g.DeviceIDs {
			v.recorded[g.KubeletResource()+"/"+id] = g
		}
	}
	return v
}

// known is Match's Known: nil when the kubelet could not be asked.
func (v *kubeletView) known() Known {
	if v == nil {
		return nil
	}
	return func(namespace, name string) bool { return v.pods[namespace+"/"+name] }
}

// holds returns the device IDs the kubelet lists for the pod's container
// and resource (nil: none, or the kubelet could not be asked), less those
// that may be an old pod's of the same name (OwnDevice).
func (v *kubeletView) holds(pod *v1.Pod, container, resource string) []string {
	if v == nil {
		return nil
	}
	var out []string
	for _, id := range v.held[pod.Namespace+"/"+pod.Name+"/"+container+"/"+resource] {
		g, recorded := v.recorded[resource+"/"+id]
		if OwnDevice(pod, container, g, recorded) {
			out = append(out, id)
		}
	}
	return out
}

// OwnDevice says whether a device the kubelet lists on the pod's container
// (it names pods by namespace/name only) is this pod's, not an old pod's
// of the same name that the kubelet still lists while it stops (a
// StatefulSet's pod deleted and created again): a device recorded for
// another pod of the name is the old pod's; an unrecorded one is taken as
// this pod's only once the container has started (the kubelet admitted
// this pod; a lost store is recovered from it then).
func OwnDevice(pod *v1.Pod, container string, rec store.Grant, recorded bool) bool {
	if recorded {
		return rec.PodUID == string(pod.UID) || rec.Namespace != pod.Namespace || rec.Name != pod.Name
	}
	return containerStarted(pod, container)
}

// containerStarted: the pod's status shows the container created by the
// kubelet (running, terminated, or with a container ID).
func containerStarted(pod *v1.Pod, name string) bool {
	for _, list := range [][]v1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for _, s := range list {
			if s.Name == name {
				return s.ContainerID != "" || s.State.Running != nil || s.State.Terminated != nil
			}
		}
	}
	return false
}

// holdsAny reports whether the container holds devices of the resource as
// the kubelet lists it, or of a vocabulary's resource, whose one call is
// recorded as the memory and core grants (vocab.go).
func (v *kubeletView) holdsAny(pod *v1.Pod, container, resource string) bool {
	if len(v.holds(pod, container, resource)) > 0 {
		return true
	}
	if resource != protocol.ResourceMemory && resource != protocol.ResourceCore {
		return false
	}
	return slices.ContainsFunc(vocabularyResources, func(r string) bool { return len(v.holds(pod, container, r)) > 0 })
}

// heldBy names the other container the kubelet lists a device of g
// (under resource) on, "" when there is none: the record is held by that
// container (a swap the reconciler moves), not lost.
func (v *kubeletView) heldBy(g store.Grant, resource string) string {
	if v == nil {
		return ""
	}
	self := g.Namespace + "/" + g.Name + "/" + g.Container
	for _, id := range g.DeviceIDs {
		if o, ok := v.owner[resource+"/"+id]; ok && o != self {
			return o
		}
	}
	return ""
}

// vocabularyResources are the vocabularies' resources the agent serves.
var vocabularyResources = func() []string {
	var out []string
	for _, v := range vocab.All {
		for _, r := range vocab.Advertised(v) {
			if isVocabulary(r) && !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}()
