package qgpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/uuid"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Claims: the DRA path (docs/dra.md). A pod that asks for its slices
// through ResourceClaims of the qGPU DeviceClasses is placed like any other
// qGPU pod: the same request, ledger, policy and assignment annotation. The
// plugin allocates the claims itself (the upstream allocator takes the first
// device that fits, and knows neither the classes nor the policy): PreBind
// writes each claim's allocation (the card as device gpu-<index> of the
// node's pool, the consumed memory and cores, the DeviceClass's config) and
// reserves it for the pod, before Bind; Unreserve takes both back. The
// profile must not run DynamicResources, which would allocate the same
// claims again.

// claimAccess reads ResourceClaims and DeviceClasses from the scheduler's
// informers; nil in unit tests without them.
type claimAccess struct {
	claims  resourcelisters.ResourceClaimLister
	classes resourcelisters.DeviceClassLister
	slices  resourcelisters.ResourceSliceLister
}

// servingNodes are the nodes whose agent serves qGPU claims: a
// ResourceSlice of the driver, in the pool named after its node, that
// offers devices. A node whose agent runs device plugins publishes none,
// and one whose apiserver dropped the consumable-capacity fields withdrew
// its devices (docs/dra.md#when-draconsumablecapacity-is-off).
func (c *claimAccess) servingNodes() (sets.Set[string], error) {
	all, err := c.slices.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := sets.New[string]()
	for _, s := range all {
		if s.Spec.Driver == protocol.DRADriver && s.Spec.NodeName != nil && s.Spec.Pool.Name == *s.Spec.NodeName && len(s.Spec.Devices) > 0 {
			out.Insert(*s.Spec.NodeName)
		}
	}
	return out, nil
}

// claimNodes narrows a claimed pod's cycle to the nodes that serve qGPU
// claims, and notes the cards whose taints its claims do not tolerate;
// nil for a pod without claims or without the listers.
func (p *QGPU) claimNodes(s *cycleState, req *request.Request) (*fwk.PreFilterResult, *fwk.Status) {
	if p.claims == nil || p.claims.slices == nil || len(req.Claims) == 0 {
		return nil, nil
	}
	nodes, err := p.claims.servingNodes()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	if s.untolerated, err = p.claims.untoleratedCards(req); err != nil {
		return nil, fwk.AsStatus(err)
	}
	if nodes.Len() == 0 {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ReasonNoClaimNode)
	}
	return &fwk.PreFilterResult{NodeNames: nodes}, nil
}

// ReasonNoClaimNode: no node serves qGPU claims.
const ReasonNoClaimNode = "no node serves qGPU claims: none has a ResourceSlice of driver " + protocol.DRADriver +
	" with devices (run its agent with --kubelet-api=dra, and kube-apiserver with DRAConsumableCapacity; docs/dra.md)"

func (c *claimAccess) get(namespace, name string) (*resourceapi.ResourceClaim, error) {
	return c.claims.ResourceClaims(namespace).Get(name)
}

// parseClaims reads a pod's claims; nil (and no error) for a pod that
// asks through none of the qGPU DeviceClasses.
func (p *QGPU) parseClaims(pod *v1.Pod) (*request.Request, error) {
	if p.claims == nil || !request.UsesClaims(pod) {
		return nil, nil
	}
	return request.ParseClaims(pod, p.claims.get)
}

// claimStatus is PreFilter's verdict on the claims of a pod that uses
// ResourceClaims, given what parse made of it: nil to go on.
func (p *QGPU) claimStatus(ctx context.Context, pod *v1.Pod, req *request.Request, err error) *fwk.Status {
	var allocated *request.AllocatedClaimError
	switch {
	case errors.As(err, &allocated) && allocated.Stale:
		// Off the scheduling goroutine, decided from the API server
		// (stale.go); the claim's update requeues the pod.
		p.stale.add(allocated, pod)
		p.rejections.rejected(pointPreFilter, reasonClaimPending)
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	case errors.Is(err, request.ErrClaimPending):
		p.rejections.rejected(pointPreFilter, reasonClaimPending)
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	case err != nil:
		return nil // PreFilter rejects it as any invalid request
	case req != nil && len(req.OtherClaims) > 0:
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
			"resourceClaims[%s]: names no qGPU DeviceClass: qgpu-scheduler allocates only %s devices, and would bind the pod with that claim unallocated; "+
				"a pod with a qGPU slice beside another driver's device is not supported yet (docs/dra.md#the-scheduler-profile)",
			strings.Join(req.OtherClaims, ", "), protocol.DRADriver))
	case req != nil && len(req.Claims)+len(req.Shared) > 0 && p.runsDynamicResources():
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
			"this profile runs %s, which would allocate the qGPU claims a second time: disable it in the profile (docs/dra.md#the-scheduler-profile)", names.DynamicResources))
	case req == nil && request.UsesClaims(pod) && !p.runsDynamicResources():
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
			"the pod's ResourceClaims name no qGPU DeviceClass, and this profile does not run %s to allocate them (docs/dra.md#the-scheduler-profile)", names.DynamicResources))
	}
	return nil
}

// runsDynamicResources reports whether the profile enables the upstream
// DRA plugin; asked once, as bindsItself.
func (p *QGPU) runsDynamicResources() bool {
	p.draOnce.Do(func() {
		if l, ok := p.handle.(pluginLister); ok {
			p.dra = slices.ContainsFunc(l.ListPlugins().PreFilter.Enabled, func(pl config.Plugin) bool { return pl.Name == names.DynamicResources })
		}
	})
	return p.dra
}

// allocateClaims writes the allocation of every claim of the pod and
// reserves it for the pod. A claim allocated since PreFilter (by anyone)
// fails the cycle; Unreserve then takes back what this call wrote.
func (p *QGPU) allocateClaims(ctx context.Context, s *cycleState, pod *v1.Pod, node string) error {
	for _, ref := range s.req.Claims {
		slice, ok := sliceOf(s.assignment, ref.Container)
		if !ok {
			return fmt.Errorf("claim %s/%s: no slice reserved for container %s", ref.Namespace, ref.Name, ref.Container)
		}
		class, err := p.claims.classes.Get(protocol.DRADeviceClass(s.req.Class))
		if err != nil {
			return fmt.Errorf("claim %s/%s: DeviceClass %s: %w", ref.Namespace, ref.Name, protocol.DRADeviceClass(s.req.Class), err)
		}
		share := uuid.NewUUID()
		if s.shares == nil {
			s.shares = map[types.UID]types.UID{}
		}
		s.shares[ref.UID] = share
		alloc := allocationOf(ref, share, slice, node, class)
		stored, err := p.writeClaim(ctx, ref, func(c *resourceapi.ResourceClaim) error {
			if c.Status.Allocation != nil {
				return fmt.Errorf("claim %s/%s was allocated by another in the meantime", c.Namespace, c.Name)
			}
			c.Status.Allocation = alloc
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
			return nil
		})
		if err != nil {
			return err
		}
		if !keptCapacity(stored) {
			return p.capacityDropped(ctx, ref, pod)
		}
	}
	return nil
}

// keptCapacity reports whether the stored allocation still carries the
// share ID and consumed capacity: an apiserver without the
// DRAConsumableCapacity gate drops both silently, and the node could then
// not tell the slice from the whole card.
func keptCapacity(c *resourceapi.ResourceClaim) bool {
	if c == nil || c.Status.Allocation == nil {
		return false
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == protocol.DRADriver && (r.ShareID == nil || len(r.ConsumedCapacity) == 0) {
			return false
		}
	}
	return true
}

// capacityDropped takes back the allocation the apiserver just stored
// without its capacity (sharedAs cannot recognise it: no share ID) and
// names the gate.
func (p *QGPU) capacityDropped(ctx context.Context, ref request.ClaimRef, pod *v1.Pod) error {
	capacityless := func(c *resourceapi.ResourceClaim) bool { return c.Status.Allocation != nil && !keptCapacity(c) }
	if err := p.takeBack(ctx, ref, pod, capacityless); err != nil {
		klog.FromContext(ctx).Error(err, "Taking back a qGPU claim stored without its capacity", "claim", klog.KRef(ref.Namespace, ref.Name))
	}
	return fmt.Errorf("claim %s/%s: the apiserver dropped the allocation's shareID and consumedCapacity: "+
		"enable the DRAConsumableCapacity feature gate on kube-apiserver (docs/dra.md#feature-gates)", ref.Namespace, ref.Name)
}

// releaseClaims undoes allocateClaims for the claims this plugin allocated
// for this pod; best effort: a claim left allocated keeps the pod's next
// cycle waiting until that cycle releases it (staleClaims).
func (p *QGPU) releaseClaims(ctx context.Context, s *cycleState, pod *v1.Pod) {
	for _, ref := range s.req.Claims {
		share, ok := s.shares[ref.UID]
		if !ok {
			continue // PreBind stopped before this claim
		}
		if err := p.takeBack(ctx, ref, pod, sharedAs(share)); err != nil {
			klog.FromContext(ctx).Error(err, "Releasing a qGPU claim after a failed binding", "pod", klog.KObj(pod), "claim", klog.KRef(ref.Namespace, ref.Name))
		}
	}
}

// takeBack drops pod from the claim's consumers and, with none left, the
// allocation, if whose says the allocation is the one to take back;
// nothing otherwise.
func (p *QGPU) takeBack(ctx context.Context, ref request.ClaimRef, pod *v1.Pod, whose func(*resourceapi.ResourceClaim) bool) error {
	_, err := p.writeClaim(ctx, ref, func(c *resourceapi.ResourceClaim) error {
		if !whose(c) {
			return errNothingToDo
		}
		c.Status.ReservedFor = slices.DeleteFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod.UID })
		if len(c.Status.ReservedFor) == 0 {
			c.Status.Allocation = nil
		}
		return nil
	})
	if errors.Is(err, errNothingToDo) {
		return nil
	}
	return err
}

var errNothingToDo = errors.New("nothing to do")

// writeClaim applies change to the claim's latest version and writes its
// status, retrying on conflicts, and returns what the apiserver stored;
// the claim must still have ref's UID, and it carries the finalizer that makes the resource-claim controller
// deallocate it once its last consumer is gone (as upstream's allocator
// does).
func (p *QGPU) writeClaim(ctx context.Context, ref request.ClaimRef, change func(*resourceapi.ResourceClaim) error) (*resourceapi.ResourceClaim, error) {
	api := p.handle.ClientSet().ResourceV1().ResourceClaims(ref.Namespace)
	var stored *resourceapi.ResourceClaim
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := api.Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("claim %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		if c.UID != ref.UID {
			return fmt.Errorf("claim %s/%s was re-created (uid %s, want %s)", ref.Namespace, ref.Name, c.UID, ref.UID)
		}
		if c.DeletionTimestamp != nil {
			return fmt.Errorf("claim %s/%s is being deleted", ref.Namespace, ref.Name)
		}
		if err := change(c); err != nil {
			return err
		}
		if c.Status.Allocation != nil && !slices.Contains(c.Finalizers, resourceapi.Finalizer) {
			alloc, reserved := c.Status.Allocation, c.Status.ReservedFor
			c.Finalizers = append(c.Finalizers, resourceapi.Finalizer)
			if c, err = api.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
				return err
			}
			c.Status.Allocation, c.Status.ReservedFor = alloc, reserved
		}
		stored, err = api.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	})
	return stored, err
}

// sharedAs is whether the claim still holds the allocation a cycle wrote
// with share: the share ID is drawn afresh for every allocation, so an
// allocation written since (by a later cycle of the same pod) is not
// mistaken for it.
func sharedAs(share types.UID) func(*resourceapi.ResourceClaim) bool {
	return func(c *resourceapi.ResourceClaim) bool {
		if c.Status.Allocation == nil {
			return false
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == protocol.DRADriver && r.ShareID != nil && *r.ShareID == share {
				return true
			}
		}
		return false
	}
}

// allocationOf is one claim's allocation: its slice as the consumed
// capacity of the card's device in the node's pool, the DeviceClass's
// config for the request, and the node it is bound to.
func allocationOf(ref request.ClaimRef, share types.UID, slice protocol.Slice, node string, class *resourceapi.DeviceClass) *resourceapi.AllocationResult {
	// Every capacity of the device, cores 0 for an online slice, as the
	// upstream allocator records them; the agent refuses a result without
	// cores.
	consumed := map[resourceapi.QualifiedName]resource.Quantity{
		protocol.DRACapacityMemory: *resource.NewQuantity(slice.MemoryGiB<<30, resource.BinarySI),
		protocol.DRACapacityCores:  *resource.NewQuantity(slice.Cores, resource.DecimalSI),
	}
	a := &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: ref.Request, Driver: protocol.DRADriver, Pool: node, Device: protocol.DRADeviceName(slice.Index),
			ShareID: &share, ConsumedCapacity: consumed,
		}}},
		NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node},
		}}}}},
	}
	for _, cfg := range class.Spec.Config {
		a.Devices.Config = append(a.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source: resourceapi.AllocationConfigSourceClass, Requests: []string{ref.Request}, DeviceConfiguration: cfg.DeviceConfiguration,
		})
	}
	return a
}

// sliceOf is the one slice Reserve chose for a container.
func sliceOf(assignment []protocol.ContainerAssignment, container string) (protocol.Slice, bool) {
	for _, c := range assignment {
		if c.Name == container && len(c.Slices) == 1 {
			return c.Slices[0], true
		}
	}
	return protocol.Slice{}, false
}
