package allocate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/agent/cardbudget"
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
	// in (README: "Which pod the kubelet is admitting"). A transient refusal
	// is asked again after each wait of KubeletBackoff (nil:
	// podresources.DefaultBackoff); one that lasts refuses the call. Only
	// an absent API leaves the order rule alone (README: "When the kubelet
	// does not answer").
	Kubelet        podresources.Lister
	KubeletBackoff []time.Duration
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
	// Grantable, when set, refuses a card that must not be handed out now
	// (unhealthy, in MIG mode, not this node's), saying which and why.
	Grantable func(uuid string) error

	mu sync.Mutex
}

// Exclusive is held through every call, from reading the records and the
// kubelet's list to writing the grant: whoever else corrects records
// against the kubelet (the reconciler) holds it too, so that the records
// and the kubelet's list it compares are of one instant. A record is
// written before its answer, and the kubelet lists devices only after the
// answer; between a record read and a later list, a call answered in
// between shows devices whose record the read missed.
func (a *Allocator) Exclusive() sync.Locker { return &a.mu }

// Allocate answers one container's request for deviceIDs of resource.
// The call goes, in this order of evidence (README: "Which container is
// this call for"), to the container the kubelet is admitting (Match), to a
// container whose grant the kubelet asks for again with the same devices
// (repeated) or with fresh ones after losing its record (re-issued), never
// to a container the kubelet already lists as holding the resource; when
// the evidence names two containers with different answers, it refuses.
func (a *Allocator) Allocate(ctx context.Context, resource string, deviceIDs []string) (*pluginapi.ContainerAllocateResponse, error) {
	if len(deviceIDs) == 0 {
		return nil, fmt.Errorf("%w: no device IDs for %s", ErrBadRequest, resource)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	backend, policy, err := a.Config()
	if err != nil {
		return nil, fmt.Errorf("enforcement backend: %w", err)
	}
	backend = enforce.Editing(backend)
	c, err := a.route(ctx, resource, deviceIDs)
	if err != nil {
		return nil, err
	}
	if c.existing != nil {
		return a.answerAgain(ctx, backend, policy, *c.existing, resource, deviceIDs)
	}
	if isVocabulary(resource) {
		return a.allocateVocabulary(ctx, backend, policy, c.first, resource, deviceIDs)
	}
	return a.grantNew(ctx, backend, policy, c.first, resource, deviceIDs)
}

// grantNew hands the container its first grant of resource: capacity
// check, the backend's answer, the record, and the grant annotation once
// the pod is complete.
func (a *Allocator) grantNew(ctx context.Context, backend enforce.Backend, policy protocol.Policy, cand *Candidate, resource string, deviceIDs []string) (*pluginapi.ContainerAllocateResponse, error) {
	g := a.grantOf(cand, resource, deviceIDs)
	if err := a.cardsGrantable(g); err != nil {
		return nil, err
	}
	if err := a.withinCapacity(ctx, g); err != nil {
		err = fmt.Errorf("pod %s/%s container %s: %w", g.Namespace, g.Name, g.Container, err)
		if a.Recorder != nil {
			a.Recorder.Event(cand.Pod, v1.EventTypeWarning, ReasonOverCapacity, err.Error())
		}
		return nil, err
	}
	resp, err := a.answer(ctx, backend, requestOf(g, policy))
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s container %s: %w", g.Namespace, g.Name, g.Container, err)
	}
	if err := stillAsked(ctx, g); err != nil {
		return nil, err
	}
	if err := a.Store.Put(g); err != nil {
		return nil, fmt.Errorf("recording the grant: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Granted", "pod", klog.KObj(cand.Pod), "container", g.Container, "resource", resource,
		"amount", g.Amount, "backend", backend.Name(), "devices", len(deviceIDs))
	a.notifyIfComplete(cand)
	return resp, nil
}

// answerAgain answers a container that already holds grant g with the same
// grant (same cards, same environment and mounts), and records the devices
// the kubelet now gave it, so the reconciler finds the record by them.
func (a *Allocator) answerAgain(ctx context.Context, backend enforce.Backend, policy protocol.Policy, g store.Grant, resource string, deviceIDs []string) (*pluginapi.ContainerAllocateResponse, error) {
	if err := a.cardsGrantable(g); err != nil {
		return nil, err
	}
	var resp *pluginapi.ContainerAllocateResponse
	var err error
	if isVocabulary(resource) {
		resp, err = a.answerVocabularyAgain(ctx, backend, g, policy, resource)
	} else {
		resp, err = a.answer(ctx, backend, requestOf(g, policy))
	}
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s container %s: %w", g.Namespace, g.Name, g.Container, err)
	}
	if err := stillAsked(ctx, g); err != nil {
		return nil, err
	}
	if err := a.recordDevices(g, resource, deviceIDs); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Answered again with the container's grant", "pod", klog.KRef(g.Namespace, g.Name),
		"container", g.Container, "resource", g.Resource, "cards", len(g.Slices))
	a.notifyIfUnannotated(ctx, g.PodUID)
	return resp, nil
}

// recordDevices makes g's record (both records of a vocabulary's call)
// name the devices the kubelet now gave the container, so that the
// reconciler and the next call find it by them.
func (a *Allocator) recordDevices(g store.Grant, resource string, deviceIDs []string) error {
	records := []store.Grant{g}
	if isVocabulary(resource) {
		core, ok, err := a.Store.Get(g.PodUID, g.Container, protocol.ResourceCore)
		if err != nil {
			return fmt.Errorf("reading the re-issued container's core record: %w", err)
		}
		if ok {
			records = append(records, core)
		}
	}
	var keys []string
	var puts []store.Grant
	for _, r := range records {
		if sameIDs(r.DeviceIDs, deviceIDs) && r.KubeletResource() == resource {
			continue
		}
		r.DeviceIDs = append([]string(nil), deviceIDs...)
		if isVocabulary(resource) {
			r.Requested = resource // records of before said nothing
		}
		keys, puts = append(keys, r.Key()), append(puts, r)
	}
	if len(puts) == 0 {
		return nil
	}
	if err := a.Store.Replace(keys, puts); err != nil {
		return fmt.Errorf("recording the re-issued devices: %w", err)
	}
	return nil
}

// ErrCallEnded is wrapped when the call's context ended before its answer
// was recorded: the kubelet (or the agent restarting its plugins) gave up
// on it and never sees the answer, so nothing is recorded.
var ErrCallEnded = errors.New("Allocate call ended before its answer was recorded")

func stillAsked(ctx context.Context, g store.Grant) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pod %s/%s container %s: %w: %v", g.Namespace, g.Name, g.Container, ErrCallEnded, err)
	}
	return nil
}

// cardsGrantable refuses the grant when one of its cards must not be
// handed out now.
func (a *Allocator) cardsGrantable(g store.Grant) error {
	if a.Grantable == nil {
		return nil
	}
	for _, s := range g.Slices {
		if err := a.Grantable(s.UUID); err != nil {
			return fmt.Errorf("pod %s/%s container %s: %w: %w", g.Namespace, g.Name, g.Container, ErrCardNotGrantable, err)
		}
	}
	return nil
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
		if err = checkCapacity(a.Cards(), grants, cardbudget.LivePods(pods), g); err == nil {
			return nil
		}
	}
	if pods, err = a.Pods.Fresh(ctx); err != nil {
		return fmt.Errorf("listing pods to check the card's capacity: %w", err)
	}
	return checkCapacity(a.Cards(), grants, cardbudget.LivePods(pods), g)
}

// answer is the backend's answer to req, plus the device nodes of its
// cards on the memory call.
func (a *Allocator) answer(ctx context.Context, backend enforce.Backend, req enforce.Request) (*pluginapi.ContainerAllocateResponse, error) {
	req.CardSlices = a.cardSlices
	resp, err := backend.Allocate(req)
	if err != nil || a.Devices == nil || req.Resource != protocol.ResourceMemory {
		return resp, err
	}
	specs, missing := a.Devices.Specs(req.Slices)
	if len(missing) > 0 {
		klog.FromContext(ctx).Info("No device node for a granted card; the container gets only what the backend passes",
			"pod", klog.KRef(req.Namespace, req.Pod), "container", req.Container, "cards", missing, "deviceRoot", a.Devices.Root)
	}
	resp.Devices = append(resp.Devices, specs...)
	return resp, nil
}

func (a *Allocator) grantOf(c *Candidate, resource string, ids []string) store.Grant {
	return grantFor(c, resource, ids, a.now())
}

func (a *Allocator) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// grantFor is the record of c's grant of resource with the devices ids.
func grantFor(c *Candidate, resource string, ids []string, now time.Time) store.Grant {
	return store.Grant{
		PodUID: string(c.Pod.UID), Namespace: c.Pod.Namespace, Name: c.Pod.Name,
		Container: c.Container.Name, Resource: resource,
		DeviceIDs: append([]string(nil), ids...),
		Amount:    Amount(c.Assignment.Class, c.Container, resource),
		Class:     c.Assignment.Class,
		Slices:    append([]protocol.Slice(nil), c.Container.Slices...),
		GrantedAt: now.UTC(),
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

// notifyIfUnannotated hands the pod's grant to OnPodGranted when every
// (container, resource) of it is recorded and its qgpu.io/grant annotation
// is missing or says otherwise: a grant completed by an answer given again
// or a record recovered, or whose first write was lost, is written as a
// first grant is.
func (a *Allocator) notifyIfUnannotated(ctx context.Context, podUID string) {
	if a.OnPodGranted == nil {
		return
	}
	pods, err := a.Pods.Cached()
	if err != nil {
		return
	}
	i := slices.IndexFunc(pods, func(p *v1.Pod) bool { return string(p.UID) == podUID })
	if i < 0 {
		return
	}
	pod := pods[i]
	assignment, err := AssignmentOf(pod, a.Node)
	if err != nil {
		return
	}
	grants, err := a.Store.List()
	if err != nil {
		return
	}
	grant, complete := BuildGrant(pod, assignment, a.Node, grants)
	if have, err := GrantOf(pod); !complete || (err == nil && equality.Semantic.DeepEqual(have, grant)) {
		return
	}
	klog.FromContext(ctx).V(2).Info("Writing the grant of a pod whose annotation is missing or differs", "pod", klog.KObj(pod))
	a.OnPodGranted(pod, grant)
}
