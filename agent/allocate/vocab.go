package allocate

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

// A container of a pod written in another system's vocabulary
// (docs/vocabularies.md) asks the kubelet for one resource the agent
// serves (vcuda-core, one of T9k's three, or HAMi's nvidia.com/gpu): that
// one call carries its whole slice. The agent records it as the container's
// memory and qgpu-core grants, with the vocabulary's device IDs, so that
// the grant annotation, the capacity check, the metrics and HAMi-core's
// upkeep read it as any general container.

// isVocabulary reports whether resource is a vocabulary's.
func isVocabulary(resource string) bool {
	_, ok := vocab.Of(resource)
	return ok
}

// vocabularyAmount is what the kubelet asks of resource for container c of
// a general assignment: the cores for a percent of a card, the number of
// cards for a card count, 1 for the whole node.
func vocabularyAmount(class protocol.Class, c protocol.ContainerAssignment, resource string) int64 {
	if class != protocol.ClassGeneral || len(c.Slices) == 0 {
		return 0
	}
	_, cores := c.Total()
	switch resource {
	case vocab.VCUDACore, vocab.T9kGPUPercent:
		return cores
	case vocab.T9kGPU, vocab.HAMiGPU:
		return int64(len(c.Slices))
	case vocab.T9kGPUNode:
		return 1
	}
	return 0
}

// grantResource is the resource under which a call for resource is
// recorded: a vocabulary's call is recorded as the memory grant (and a core one).
func grantResource(resource string) string {
	if isVocabulary(resource) {
		return protocol.ResourceMemory
	}
	return resource
}

// allocateVocabulary answers a matched vocabulary call: both grants are
// checked against the cards and stored in one transaction before the answer
// goes back.
func (a *Allocator) allocateVocabulary(ctx context.Context, backend enforce.Backend, policy protocol.Policy, cand *Candidate, resource string, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	mem := a.grantOf(cand, protocol.ResourceMemory, ids)
	core := a.grantOf(cand, protocol.ResourceCore, ids)
	mem.Requested, core.Requested = resource, resource
	if err := a.cardsGrantable(mem); err != nil {
		return nil, err
	}
	for _, g := range []store.Grant{mem, core} {
		if err := a.withinCapacity(ctx, g); err != nil {
			err = fmt.Errorf("pod %s/%s container %s: %w", g.Namespace, g.Name, g.Container, err)
			if a.Recorder != nil {
				a.Recorder.Event(cand.Pod, v1.EventTypeWarning, ReasonOverCapacity, err.Error())
			}
			return nil, err
		}
	}
	resp, err := a.answerVocabulary(ctx, backend, mem, policy, cand.Pod, resource)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s container %s: %w", mem.Namespace, mem.Name, mem.Container, err)
	}
	if err := stillAsked(ctx, mem); err != nil {
		return nil, err
	}
	if err := a.Store.Replace(nil, []store.Grant{mem, core}); err != nil {
		return nil, fmt.Errorf("recording the grant: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Granted", "pod", klog.KObj(cand.Pod), "container", mem.Container, "resource", resource,
		"memoryGiB", mem.Amount, "cores", core.Amount, "backend", backend.Name(), "devices", len(ids))
	a.notifyIfComplete(cand)
	return resp, nil
}

// answerVocabulary is the backend's memory answer (with the cards' device
// nodes) merged with its core answer, adjusted to what the vocabulary's
// system promises (enforce.VocabularyEnv).
func (a *Allocator) answerVocabulary(ctx context.Context, backend enforce.Backend, mem store.Grant, policy protocol.Policy, pod *v1.Pod, resource string) (*pluginapi.ContainerAllocateResponse, error) {
	// The adjustment rides on both requests, so that the backend's delivery
	// (a CDI spec per answer) carries it.
	edit := func(envs map[string]string) { enforce.VocabularyEnv(resource, pod, mem.Container, mem.Slices, envs) }
	memReq := requestOf(mem, policy)
	memReq.Edit = edit
	resp, err := a.answer(ctx, backend, memReq)
	if err != nil {
		return nil, err
	}
	core := mem
	core.Resource = protocol.ResourceCore
	coreReq := requestOf(core, policy)
	coreReq.Edit = edit
	extra, err := backend.Allocate(coreReq)
	if err != nil {
		return nil, err
	}
	if resp.Envs == nil {
		resp.Envs = map[string]string{}
	}
	for k, v := range extra.Envs {
		resp.Envs[k] = v
	}
	resp.Mounts = append(resp.Mounts, extra.Mounts...)
	resp.Devices = append(resp.Devices, extra.Devices...)
	resp.CdiDevices = append(resp.CdiDevices, extra.CdiDevices...)
	for k, v := range extra.Annotations {
		if resp.Annotations == nil {
			resp.Annotations = map[string]string{}
		}
		resp.Annotations[k] = v
	}
	return resp, nil
}

// answerVocabularyAgain answers a vocabulary call the kubelet repeats
// from the container's recorded memory grant.
func (a *Allocator) answerVocabularyAgain(ctx context.Context, backend enforce.Backend, g store.Grant, policy protocol.Policy, resource string) (*pluginapi.ContainerAllocateResponse, error) {
	// repeated found the pod alive in the cache or, failing that, in a
	// fresh list: look in the same places.
	for _, list := range []func() ([]*v1.Pod, error){a.Pods.Cached, func() ([]*v1.Pod, error) { return a.Pods.Fresh(ctx) }} {
		pods, err := list()
		if err != nil {
			continue
		}
		for _, p := range pods {
			if string(p.UID) == g.PodUID {
				return a.answerVocabulary(ctx, backend, g, policy, p, resource)
			}
		}
	}
	return nil, fmt.Errorf("%w: pod %s/%s of the repeated %s call is not in the cache", ErrNoMatch, g.Namespace, g.Name, resource)
}

// namesVocabulary reports whether the spec of the pod's container names an
// advertised vocabulary resource: such a container is never asked for by a
// native call.
func namesVocabulary(pod *v1.Pod, container string) bool {
	for _, v := range vocab.All {
		for _, r := range vocab.Advertised(v) {
			if specAmount(pod, container, r) != 0 {
				return true
			}
		}
	}
	return false
}
