package allocate

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// reissueCandidates are the grants a call for n of resource can be a
// re-issue of: the kubelet calls Allocate again, with fresh device IDs, for
// a container it has no record of (its device manager's
// GetDeviceRunContainerOptions, when a container of an admitted pod starts
// and its devices are missing, e.g. after a restart). Such a container has
// a grant in the store, requested under the call's resource (a
// vocabulary's call is recorded as memory and core grants: its memory
// record stands for both), its pod is alive and taken in by the kubelet,
// the kubelet lists no devices of the resource on it, and none of the
// record's devices on another container (that container holds the record:
// a swap, not a loss). Only containers the kubelet lists can be told apart
// this way: app containers and restartable init containers (an init
// container that ran to completion is not listed and is served by the
// store alone). Without the kubelet's list there are none: nothing tells a
// lost record from a held one.
// The records left out because another container holds them are named in
// held, for the refusal.
func reissueCandidates(pods []*v1.Pod, view *kubeletView, grants []store.Grant, resource string, n int64) (again []store.Grant, held []string) {
	if view == nil {
		return nil, nil
	}
	byUID := make(map[string]*v1.Pod, len(pods))
	for _, p := range pods {
		byUID[string(p.UID)] = p
	}
	for _, g := range grants {
		p := byUID[g.PodUID]
		if p == nil || p.DeletionTimestamp != nil || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed ||
			!view.pods[p.Namespace+"/"+p.Name] || !listedByKubelet(p, g.Container) {
			continue
		}
		requested := requestedAs(g, p)
		if requested != resource || requestedAmount(g, requested) != n ||
			(isVocabulary(requested) && g.Resource != protocol.ResourceMemory) ||
			len(view.holds(p, g.Container, requested)) > 0 {
			continue
		}
		if by := view.heldBy(g, requested); by != "" {
			held = append(held, fmt.Sprintf("%s/%s/%s's record (%s) is held by %s, where the kubelet lists its devices",
				g.Namespace, g.Name, g.Container, cardsOf(g.Slices), by))
			continue
		}
		again = append(again, g)
	}
	return again, held
}

// requestedAs is the resource the kubelet asked for when g was granted:
// the record says so; a memory or core record written before records said
// it was requested under the vocabulary the container's spec names.
func requestedAs(g store.Grant, pod *v1.Pod) string {
	if g.Requested != "" || (g.Resource != protocol.ResourceMemory && g.Resource != protocol.ResourceCore) {
		return g.KubeletResource()
	}
	for _, r := range vocabularyResources {
		if specAmount(pod, g.Container, r) != 0 {
			return r
		}
	}
	return g.Resource
}

// requestedAmount is how many devices of requested the kubelet asked for g.
func requestedAmount(g store.Grant, requested string) int64 {
	if !isVocabulary(requested) {
		return g.Amount
	}
	return vocabularyAmount(g.Class, protocol.ContainerAssignment{Name: g.Container, Slices: g.Slices}, requested)
}

// listedByKubelet: the kubelet's PodResources lists the pod's app
// containers and its restartable init containers (sidecars).
func listedByKubelet(pod *v1.Pod, container string) bool {
	if slices.ContainsFunc(pod.Spec.Containers, func(c v1.Container) bool { return c.Name == container }) {
		return true
	}
	return slices.ContainsFunc(pod.Spec.InitContainers, func(c v1.Container) bool {
		return c.Name == container && c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
	})
}

// rivalsOf returns the re-issue candidates that compete with a container
// waiting for its first grant: those whose answer differs from its answer
// (the same cards and amounts are the same answer, whoever gets it), and
// whose container is not shown running (a running container is not being
// started, so the kubelet is not re-issuing for it; one whose record the
// kubelet lost while it kept running would otherwise block every admission
// of the same size).
func rivalsOf(first *Candidate, again []store.Grant, pods []*v1.Pod) []store.Grant {
	var out []store.Grant
	for _, g := range again {
		if sameAnswer(g.Class, g.Slices, first.Assignment.Class, first.Container.Slices) {
			continue
		}
		i := slices.IndexFunc(pods, func(p *v1.Pod) bool { return string(p.UID) == g.PodUID })
		if i < 0 || !containerRunning(pods[i], g.Container) {
			out = append(out, g)
		}
	}
	return out
}

// containerRunning: the pod's status shows the container running.
func containerRunning(pod *v1.Pod, name string) bool {
	for _, list := range [][]v1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for _, s := range list {
			if s.Name == name {
				return s.State.Running != nil
			}
		}
	}
	return false
}

// distinctAnswers keeps one grant per distinct answer.
func distinctAnswers(grants []store.Grant) []store.Grant {
	var out []store.Grant
	for _, g := range grants {
		if !slices.ContainsFunc(out, func(o store.Grant) bool { return sameAnswer(o.Class, o.Slices, g.Class, g.Slices) }) {
			out = append(out, g)
		}
	}
	return out
}

func sameAnswer(ca protocol.Class, a []protocol.Slice, cb protocol.Class, b []protocol.Slice) bool {
	return ca == cb && slices.Equal(a, b)
}

func cardsOf(slices []protocol.Slice) string {
	var parts []string
	for _, s := range slices {
		parts = append(parts, fmt.Sprintf("card %d (%s) %d GiB %d cores", s.Index, s.UUID, s.MemoryGiB, s.Cores))
	}
	return strings.Join(parts, ", ")
}
