package allocate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/podresources"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// PodSource lists the pods bound to this node.
type PodSource interface {
	// Cached lists from the informer cache.
	Cached() ([]*v1.Pod, error)
	// Fresh lists from the API server (a consistent read).
	Fresh(ctx context.Context) ([]*v1.Pod, error)
}

// NodeConfig returns the node's current enforcement backend and policy.
type NodeConfig func() (enforce.Backend, protocol.Policy, error)

// Allocator answers Allocate calls for all three resources and the
// vocabularies' (vocab.go). Calls are
// serialised: matching reads the store and the answer writes it.
type Allocator struct {
	Node   string
	Store  *store.Store
	Pods   PodSource
	Config NodeConfig
	// Kubelet, when set, narrows each call to the pods the kubelet has taken
	// in (README: "Which pod the kubelet is admitting"). When it cannot be
	// asked, the call falls back to the order rule alone.
	Kubelet podresources.Lister
	// OnPodGranted runs (on the Allocate goroutine; it must not block) once every
	// (container, resource) of the pod's assignment holds a grant.
	OnPodGranted func(pod *v1.Pod, grant *protocol.Assignment)
	// Cards returns the node's cards, for the last-line capacity check
	// (capacity.go); nil skips the check (unit tests of matching alone).
	Cards func() []protocol.Card
	// Recorder, when set, records a refused grant as a Warning event on the pod.
	Recorder record.EventRecorder
	// Now is time.Now unless a test sets it.
	Now func() time.Time
	// Devices, when set, adds the granted cards' device nodes to the memory
	// answer (every qGPU container holds memory, so each gets them once).
	Devices *enforce.DeviceNodes

	mu sync.Mutex
}

// Allocate answers one container's request for deviceIDs of resource.
func (a *Allocator) Allocate(ctx context.Context, resource string, deviceIDs []string) (*pluginapi.ContainerAllocateResponse, error) {
	if len(deviceIDs) == 0 {
		return nil, fmt.Errorf("%w: no device IDs for %s", ErrBadRequest, resource)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	logger := klog.FromContext(ctx)
	backend, policy, err := a.Config()
	if err != nil {
		return nil, fmt.Errorf("enforcement backend: %w", err)
	}
	cand, err := a.match(ctx, resource, int64(len(deviceIDs)))
	if errors.Is(err, ErrNoMatch) && isVocabulary(resource) {
		if resp, ok, err := a.repeatedVocabulary(ctx, backend, policy, resource, deviceIDs); ok {
			return resp, err
		}
	} else if errors.Is(err, ErrNoMatch) {
		// Only when no container is waiting: the kubelet hands an app container
		// the devices of an init container it reuses, so equal IDs alone do not
		// mean a repeated call.
		if g, ok := a.repeated(ctx, resource, deviceIDs); ok {
			logger.V(2).Info("Repeated Allocate answered from the store", "pod", klog.KRef(g.Namespace, g.Name), "container", g.Container, "resource", resource)
			return a.answer(ctx, backend, g, policy)
		}
	}
	if err != nil {
		return nil, err
	}
	if isVocabulary(resource) {
		return a.allocateVocabulary(ctx, backend, policy, cand, resource, deviceIDs)
	}
	g := a.grantOf(cand, resource, deviceIDs)
	if err := a.withinCapacity(ctx, g); err != nil {
		err = fmt.Errorf("pod %s/%s container %s: %w", g.Namespace, g.Name, g.Container, err)
		if a.Recorder != nil {
			a.Recorder.Event(cand.Pod, v1.EventTypeWarning, ReasonOverCapacity, err.Error())
		}
		return nil, err
	}
	resp, err := a.answer(ctx, backend, g, policy)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s container %s: %w", g.Namespace, g.Name, g.Container, err)
	}
	if err := a.Store.Put(g); err != nil {
		return nil, fmt.Errorf("recording the grant: %w", err)
	}
	logger.V(2).Info("Granted", "pod", klog.KObj(cand.Pod), "container", g.Container, "resource", resource,
		"amount", g.Amount, "backend", backend.Name(), "devices", len(deviceIDs))
	a.notifyIfComplete(cand)
	return resp, nil
}

// ReasonOverCapacity is the reason of the event on a pod whose grant was refused.
const ReasonOverCapacity = "QGPUGrantRefused"

// withinCapacity runs checkCapacity against the grants of the pods alive in
// the informer cache and, if that refuses, once more against a fresh list:
// a pod the cache still shows may be gone, and its grants no longer count.
func (a *Allocator) withinCapacity(ctx context.Context, g store.Grant) error {
	if a.Cards == nil {
		return nil
	}
	grants, err := a.Store.List()
	if err != nil {
		return fmt.Errorf("reading the grants to check the card's capacity: %w", err)
	}
	pods, err := a.Pods.Cached()
	if err == nil {
		if err = checkCapacity(a.Cards(), grants, livePods(pods), g); err == nil {
			return nil
		}
	}
	if pods, err = a.Pods.Fresh(ctx); err != nil {
		return fmt.Errorf("listing pods to check the card's capacity: %w", err)
	}
	return checkCapacity(a.Cards(), grants, livePods(pods), g)
}

// answer is the backend's answer for the grant, plus the device nodes of its
// cards on the memory call.
func (a *Allocator) answer(ctx context.Context, backend enforce.Backend, g store.Grant, policy protocol.Policy) (*pluginapi.ContainerAllocateResponse, error) {
	resp, err := backend.Allocate(requestOf(g, policy))
	if err != nil || a.Devices == nil || g.Resource != protocol.ResourceMemory {
		return resp, err
	}
	specs, missing := a.Devices.Specs(g.Slices)
	if len(missing) > 0 {
		klog.FromContext(ctx).Info("No device node for a granted card; the container gets only what the backend passes",
			"pod", klog.KRef(g.Namespace, g.Name), "container", g.Container, "cards", missing, "deviceRoot", a.Devices.Root)
	}
	resp.Devices = append(resp.Devices, specs...)
	return resp, nil
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
	if err != nil || !alive(pods, g.PodUID) {
		if pods, err = a.Pods.Fresh(ctx); err != nil {
			return store.Grant{}, false
		}
	}
	return g, alive(pods, g.PodUID)
}

func alive(pods []*v1.Pod, uid string) bool {
	for _, p := range pods {
		if string(p.UID) == uid {
			return p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed
		}
	}
	return false
}

// match tries the informer cache first; when nothing matches there, the cache
// may lag the kubelet (which watches the same pods), so it lists once from the
// API server before refusing.
func (a *Allocator) match(ctx context.Context, resource string, n int64) (*Candidate, error) {
	granted := a.granted()
	known := a.known(ctx)
	pods, err := a.Pods.Cached()
	if err == nil {
		if cand, err := Match(a.Node, pods, granted, known, resource, n); err == nil {
			return cand, nil
		} else if !errors.Is(err, ErrNoMatch) {
			return nil, err
		}
	}
	pods, err = a.Pods.Fresh(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w for %d of %s in the cache, and listing pods from the API server failed: %v", ErrNoMatch, n, resource, err)
	}
	return Match(a.Node, pods, granted, known, resource, n)
}

// known asks the kubelet which pods it has taken in. The pod being admitted
// is the only one of them without all its grants, which tells apart pods with
// identical requests that the order rule alone would confuse. nil (every pod
// counts) when there is no Kubelet or it does not answer.
func (a *Allocator) known(ctx context.Context) Known {
	if a.Kubelet == nil {
		return nil
	}
	list, err := a.Kubelet.List(ctx)
	if err != nil {
		klog.FromContext(ctx).Info("Kubelet's pod list unavailable, matching by order alone", "err", err)
		return nil
	}
	names := make(map[string]bool, len(list))
	for _, p := range list {
		names[p.GetNamespace()+"/"+p.GetName()] = true
	}
	return func(namespace, name string) bool { return names[namespace+"/"+name] }
}

// granted reads the store once per call: one transaction instead of one per
// (pod, container) the matcher looks at.
func (a *Allocator) granted() Granted {
	grants, err := a.Store.List()
	if err != nil {
		// An unreadable store counts as all granted: refusing is better than
		// handing a container out twice.
		return func(string, string, string) bool { return true }
	}
	keys := make(map[string]bool, len(grants))
	for _, g := range grants {
		keys[g.Key()] = true
	}
	return func(podUID, container, resource string) bool { return keys[store.Key(podUID, container, resource)] }
}

func (a *Allocator) grantOf(c *Candidate, resource string, ids []string) store.Grant {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	return store.Grant{
		PodUID: string(c.Pod.UID), Namespace: c.Pod.Namespace, Name: c.Pod.Name,
		Container: c.Container.Name, Resource: resource,
		DeviceIDs: append([]string(nil), ids...),
		Amount:    Amount(c.Assignment.Class, c.Container, resource),
		Class:     c.Assignment.Class,
		Slices:    append([]protocol.Slice(nil), c.Container.Slices...),
		GrantedAt: now().UTC(),
	}
}

func requestOf(g store.Grant, policy protocol.Policy) enforce.Request {
	return enforce.Request{
		Resource: g.Resource, Class: g.Class, Policy: policy, Slices: g.Slices,
		PodUID: g.PodUID, Namespace: g.Namespace, Pod: g.Name, Container: g.Container,
	}
}

func (a *Allocator) notifyIfComplete(c *Candidate) {
	if a.OnPodGranted == nil {
		return
	}
	grants, err := a.Store.List()
	if err != nil {
		return
	}
	if grant, complete := BuildGrant(c.Pod, c.Assignment, a.Node, grants); complete {
		a.OnPodGranted(c.Pod, grant)
	}
}
