package allocate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/agent/store"
)

// route is where a call goes: to a container's first grant of the resource
// (first), or to the grant a container already holds (existing).
type route struct {
	first    *Candidate
	existing *store.Grant
}

// route decides which container the call for ids of resource is for.
func (a *Allocator) route(ctx context.Context, resource string, ids []string) (route, error) {
	grants, err := a.Store.List()
	if err != nil {
		// Refusing is better than handing a container out twice.
		return route{}, fmt.Errorf("%w: %v", ErrStoreUnreadable, err)
	}
	view, err := a.askKubelet(ctx, grants)
	if err != nil {
		return route{}, err
	}
	if pods, err := a.Pods.Cached(); err == nil {
		grants = a.recoverServed(ctx, view, pods, grants)
	}
	n := int64(len(ids))
	cand, pods, matchErr := a.match(ctx, view, grants, resource, n)
	again, held := reissueCandidates(pods, view, grants, resource, n)
	switch {
	case matchErr == nil:
		if rivals := rivalsOf(cand, again, pods); len(rivals) > 0 {
			return route{}, ambiguous(resource, n, cand, rivals)
		}
		return route{first: cand}, nil
	case !errors.Is(matchErr, ErrNoMatch):
		return route{}, matchErr
	}
	// No container waits for its first grant of the resource.
	// A vocabulary's call is recorded under the native memory resource.
	if g, ok := a.repeated(ctx, grantResource(resource), ids); ok {
		return route{existing: &g}, nil
	}
	switch distinct := distinctAnswers(again); len(distinct) {
	case 0:
		if len(held) > 0 {
			return route{}, fmt.Errorf("%w; %s", matchErr, strings.Join(limit(held, 4), "; "))
		}
		return route{}, matchErr
	case 1:
		return route{existing: &distinct[0]}, nil
	default:
		return route{}, ambiguous(resource, n, nil, distinct)
	}
}

// match tries the informer cache first; when nothing matches there, the cache
// may lag the kubelet (which watches the same pods), so it lists once from the
// API server before refusing. It returns the pods it matched against last.
func (a *Allocator) match(ctx context.Context, view *kubeletView, grants []store.Grant, resource string, n int64) (*Candidate, []*v1.Pod, error) {
	pods, err := a.Pods.Cached()
	if err == nil {
		cand, err := Match(a.Node, pods, served(grants, view, pods), view.known(), resource, n)
		if err == nil || !errors.Is(err, ErrNoMatch) {
			return cand, pods, err
		}
	}
	fresh, err := a.Pods.Fresh(ctx)
	if err != nil {
		return nil, pods, fmt.Errorf("%w for %d of %s in the cache, and listing pods from the API server failed: %v", ErrNoMatch, n, resource, err)
	}
	cand, err := Match(a.Node, fresh, served(grants, view, fresh), view.known(), resource, n)
	return cand, fresh, err
}

// served says a (container, resource) has been answered when the store has
// its grant or the kubelet lists devices of the resource on it.
func served(grants []store.Grant, view *kubeletView, pods []*v1.Pod) Granted {
	keys := make(map[string]bool, len(grants))
	for _, g := range grants {
		keys[g.Key()] = true
	}
	byUID := make(map[string]*v1.Pod, len(pods))
	for _, p := range pods {
		byUID[string(p.UID)] = p
	}
	return func(podUID, container, resource string) bool {
		if keys[store.Key(podUID, container, resource)] {
			return true
		}
		p := byUID[podUID]
		return p != nil && view.holdsAny(p, container, resource)
	}
}

// repeated finds the grant of a call the kubelet repeats with the same
// devices (it re-admits a container it already allocated). A record of a pod
// that is gone or terminal does not count: the kubelet has freed its devices
// and may hand them to someone else; the reconciler drops such records.
func (a *Allocator) repeated(ctx context.Context, resource string, ids []string) (store.Grant, bool) {
	g, ok, err := a.Store.ByDevices(resource, ids)
	if err != nil || !ok {
		return store.Grant{}, false
	}
	pods, err := a.Pods.Cached()
	if err != nil || !startable(pods, g.PodUID) {
		if pods, err = a.Pods.Fresh(ctx); err != nil {
			return store.Grant{}, false
		}
	}
	return g, startable(pods, g.PodUID)
}

// startable: the pod is there, not terminal and not being deleted, so the
// kubelet may still start its containers. A pod being deleted holds its
// devices until it stops, and the kubelet then hands them to others: a
// call with its devices is not a repeat of its grant.
func startable(pods []*v1.Pod, uid string) bool {
	for _, p := range pods {
		if string(p.UID) == uid {
			return p.DeletionTimestamp == nil && p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed
		}
	}
	return false
}

// ambiguous is the refusal of a call that two containers with different
// answers can be for: answering either could hand one the other's card.
func ambiguous(resource string, n int64, first *Candidate, again []store.Grant) error {
	var who []string
	if first != nil {
		who = append(who, fmt.Sprintf("%s/%s/%s (first grant, %s)", first.Pod.Namespace, first.Pod.Name, first.Container.Name, cardsOf(first.Container.Slices)))
	}
	for _, g := range again {
		who = append(who, fmt.Sprintf("%s/%s/%s (re-issued, holds %s)", g.Namespace, g.Name, g.Container, cardsOf(g.Slices)))
	}
	return fmt.Errorf("%w: a call for %d of %s can be for %s; refusing rather than risk handing one the other's card (the kubelet retries a re-issued container; README: re-issued calls)",
		ErrAmbiguous, n, resource, strings.Join(limit(who, 8), " or "))
}

func sameIDs(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
