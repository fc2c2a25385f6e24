package allocate

import (
	"context"
	"slices"

	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// kubeletView is the kubelet's PodResources List at the time of one call:
// the pods it has taken in, and the device IDs each of their containers
// holds per resource. A container that holds devices of a resource has been
// answered for it (the kubelet records the devices only after the answer),
// whatever the store says. Init containers that run to completion are not
// listed by the kubelet: for them the store alone says "served".
type kubeletView struct {
	pods map[string]bool     // namespace/name
	held map[string][]string // namespace/name/container/resource → device IDs
}

// askKubelet lists the kubelet's pods; nil (every pod counts, the store
// alone says what is served) when there is no Kubelet or it does not answer.
func (a *Allocator) askKubelet(ctx context.Context) *kubeletView {
	if a.Kubelet == nil {
		return nil
	}
	list, err := a.Kubelet.List(ctx)
	if err != nil {
		klog.FromContext(ctx).Info("Kubelet's pod list unavailable, matching by order and the store alone", "err", err)
		return nil
	}
	return newKubeletView(list)
}

func newKubeletView(list []*podresourcesapi.PodResources) *kubeletView {
	v := &kubeletView{pods: make(map[string]bool, len(list)), held: map[string][]string{}}
	for _, p := range list {
		pod := p.GetNamespace() + "/" + p.GetName()
		v.pods[pod] = true
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				key := pod + "/" + c.GetName() + "/" + d.GetResourceName()
				for _, id := range d.GetDeviceIds() {
					if !slices.Contains(v.held[key], id) {
						v.held[key] = append(v.held[key], id)
					}
				}
			}
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

// holds returns the device IDs the kubelet lists for the container's
// resource (nil: none, or the kubelet could not be asked).
func (v *kubeletView) holds(namespace, name, container, resource string) []string {
	if v == nil {
		return nil
	}
	return v.held[namespace+"/"+name+"/"+container+"/"+resource]
}
