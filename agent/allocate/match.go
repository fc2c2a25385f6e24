// Package allocate answers the kubelet's Allocate calls: it finds the
// container a call is for (the kubelet does not say), hands it the slice the
// scheduler assigned through the enforcement backend, and records the grant.
// README.md has the race analysis.
package allocate

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Amount is what container c of an assignment of class holds of resource:
// memory for every class, qgpu-core for general pods, qgpu-core-greedy for
// offline pods. 0 means the container does not ask for the resource.
func Amount(class protocol.Class, c protocol.ContainerAssignment, resource string) int64 {
	mem, cores := c.Total()
	switch {
	case resource == protocol.ResourceMemory:
		return mem
	case resource == protocol.ResourceCore && class == protocol.ClassGeneral:
		return cores
	case resource == protocol.ResourceCoreGreedy && class == protocol.ClassOffline:
		return cores
	}
	return vocabularyAmount(class, c, resource)
}

// AssignmentOf returns the pod's scheduler assignment if it is valid and was
// made for this pod on this node; a forged or stale one (another pod's UID,
// another node) is an error.
func AssignmentOf(pod *v1.Pod, node string) (*protocol.Assignment, error) {
	value, ok := pod.Annotations[protocol.AnnotationAssignment]
	if !ok {
		return nil, fmt.Errorf("no %s annotation", protocol.AnnotationAssignment)
	}
	a, err := protocol.DecodeAssignment([]byte(value))
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w", protocol.AnnotationAssignment, err)
	}
	if a.PodUID != string(pod.UID) {
		return nil, fmt.Errorf("annotation %s was made for pod UID %q, not this pod (%q): ignored", protocol.AnnotationAssignment, a.PodUID, pod.UID)
	}
	if a.Node != node || pod.Spec.NodeName != node {
		return nil, fmt.Errorf("annotation %s is for node %q, pod is bound to %q, agent runs on %q: ignored", protocol.AnnotationAssignment, a.Node, pod.Spec.NodeName, node)
	}
	return a, nil
}

// Candidate is a container that an Allocate call can be for.
type Candidate struct {
	Pod        *v1.Pod
	Assignment *protocol.Assignment
	Container  protocol.ContainerAssignment
}

// Granted reports whether (pod, container, resource) already holds a grant.
type Granted func(podUID, container, resource string) bool

// Known reports whether the kubelet has taken the pod in (it is among the
// kubelet's active pods). The kubelet adds a pod to its pod manager right
// before admitting it, one pod at a time, so the pod an Allocate call is for is
// always known, and a pod bound later, or later in the same sync batch, is
// not. nil means the kubelet could not be asked: every pod counts.
type Known func(namespace, name string) bool

// Match returns the container that an Allocate call for n units of resource is
// for: among the pods bound to node that are not terminal, carry a valid
// assignment and are known to the kubelet (when known is not nil), pods the
// kubelet is in the middle of (some grants, not all) come first, then the
// oldest by creation time, then by namespace/name; within a pod, containers
// in the kubelet's order (init containers, then containers).
// The first container not yet granted the resource whose assigned amount is n
// wins. No match is an error that lists what was there; Match never guesses.
func Match(node string, pods []*v1.Pod, granted Granted, known Known, resource string, n int64) (*Candidate, error) {
	eligible, ignored := eligiblePods(node, pods, known)
	sortPods(eligible, granted)
	var seen []string
	for _, e := range eligible {
		for _, c := range containerOrder(e.pod, e.assignment) {
			amount := Amount(e.assignment.Class, c, resource)
			if amount == 0 || granted(string(e.pod.UID), c.Name, grantResource(resource)) {
				continue
			}
			spec := specAmount(e.pod, c.Name, resource)
			if spec == 0 && (isVocabulary(resource) || namesVocabulary(e.pod, c.Name)) {
				continue // written in another vocabulary than this call's
			}
			if spec != amount {
				seen = append(seen, fmt.Sprintf("%s/%s/%s assigned %d but its spec asks for %d",
					e.pod.Namespace, e.pod.Name, c.Name, amount, spec))
				continue
			}
			if amount == n {
				return &Candidate{Pod: e.pod, Assignment: e.assignment, Container: c}, nil
			}
			seen = append(seen, fmt.Sprintf("%s/%s/%s wants %d", e.pod.Namespace, e.pod.Name, c.Name, amount))
		}
	}
	return nil, noMatchError(node, resource, n, seen, ignored)
}

func noMatchError(node, resource string, n int64, seen, ignored []string) error {
	msg := fmt.Sprintf("%s: no pod bound to node %s has a container not yet granted %s whose assignment holds exactly %d",
		ErrNoMatch, node, resource, n)
	if len(seen) > 0 {
		msg += "; ungranted containers: " + strings.Join(limit(seen, 8), ", ")
	}
	if len(ignored) > 0 {
		msg += "; ignored pods: " + strings.Join(limit(ignored, 8), "; ")
	}
	return &noMatch{msg: msg}
}

func limit(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
}

type eligible struct {
	pod        *v1.Pod
	assignment *protocol.Assignment
	inProgress bool
}

func eligiblePods(node string, pods []*v1.Pod, known Known) ([]*eligible, []string) {
	var out []*eligible
	var ignored []string
	unknown := 0
	for _, p := range pods {
		if p.Spec.NodeName != node || p.DeletionTimestamp != nil ||
			p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		if _, ok := p.Annotations[protocol.AnnotationAssignment]; !ok {
			continue
		}
		a, err := AssignmentOf(p, node)
		if err != nil {
			ignored = append(ignored, fmt.Sprintf("%s/%s (%v)", p.Namespace, p.Name, err))
			continue
		}
		if known != nil && !known(p.Namespace, p.Name) {
			unknown++
			continue
		}
		out = append(out, &eligible{pod: p, assignment: a})
	}
	if unknown > 0 {
		ignored = append(ignored, fmt.Sprintf("%d not yet taken in by the kubelet", unknown))
	}
	return out, ignored
}

func sortPods(pods []*eligible, granted Granted) {
	for _, e := range pods {
		g, all := grantCount(e, granted)
		e.inProgress = g > 0 && g < all
	}
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if a.inProgress != b.inProgress {
			return a.inProgress
		}
		ta, tb := a.pod.CreationTimestamp.Time, b.pod.CreationTimestamp.Time
		if !ta.Equal(tb) {
			return ta.Before(tb)
		}
		if a.pod.Namespace != b.pod.Namespace {
			return a.pod.Namespace < b.pod.Namespace
		}
		return a.pod.Name < b.pod.Name
	})
}

// grantCount returns how many of the pod's (container, resource) pairs are granted, of all.
func grantCount(e *eligible, granted Granted) (int, int) {
	g, all := 0, 0
	for _, c := range containerOrder(e.pod, e.assignment) {
		for _, r := range protocol.Resources {
			// A vocabulary container's one call records both of these.
			if Amount(e.assignment.Class, c, r) == 0 {
				continue
			}
			all++
			if granted(string(e.pod.UID), c.Name, r) {
				g++
			}
		}
	}
	return g, all
}

// containerOrder returns the assigned containers in the order the kubelet
// allocates them: init containers, then containers. An assigned container the
// spec does not name is left out: the kubelet never allocates it.
func containerOrder(pod *v1.Pod, a *protocol.Assignment) []protocol.ContainerAssignment {
	byName := map[string]protocol.ContainerAssignment{}
	for _, c := range a.Containers {
		byName[c.Name] = c
	}
	var out []protocol.ContainerAssignment
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if ca, ok := byName[c.Name]; ok {
				out = append(out, ca)
				delete(byName, c.Name)
			}
		}
	}
	return out
}

// specAmount is the container's limit (or, without one, request) of resource
// in the pod spec: what the kubelet will ask for.
func specAmount(pod *v1.Pod, container, resource string) int64 {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name != container {
				continue
			}
			if q, ok := c.Resources.Limits[v1.ResourceName(resource)]; ok {
				return q.Value()
			}
			if q, ok := c.Resources.Requests[v1.ResourceName(resource)]; ok {
				return q.Value()
			}
			return 0
		}
	}
	return 0
}
