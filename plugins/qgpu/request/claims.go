package request

import (
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ErrClaimPending marks a pod whose qGPU claims cannot be read yet: a claim
// of a template not yet created by the resource-claim controller, or one
// still allocated from an earlier attempt. The pod waits; it is not broken.
var ErrClaimPending = errors.New("ResourceClaim not ready")

// AllocatedClaimError is a claim still allocated when its pod is to be
// placed. It wraps ErrClaimPending: the pod waits for the release.
type AllocatedClaimError struct {
	Ref ClaimRef
	// Stale: qGPU allocated it for this very pod, which is not bound: a
	// scheduler that wrote it did not live to bind the pod (or to take it
	// back). Nothing else holds it; whoever places the pod may release it.
	Stale bool
	// Share is the stale allocation's share ID (drawn afresh for every
	// allocation), so that releasing it never takes back a newer one.
	Share types.UID
}

func (e *AllocatedClaimError) Error() string {
	why := "waiting for its release"
	if e.Stale {
		why = "a binding that never happened left it allocated for this pod; releasing it"
	}
	return fmt.Sprintf("%v: ResourceClaim %s is allocated: %s", ErrClaimPending, e.Ref.Name, why)
}

func (e *AllocatedClaimError) Unwrap() error { return ErrClaimPending }

// staleFor reports whether qGPU allocated the claim for pod (every result
// is of its driver with a share ID: no other allocator may write those,
// docs/dra.md), nothing but pod holds it, and pod is not bound as far as
// the caller's cache knows (the release asks the API server again); and
// the allocation's share ID.
func staleFor(claim *resourceapi.ResourceClaim, pod *v1.Pod) (bool, types.UID) {
	if pod.Spec.NodeName != "" {
		return false, ""
	}
	for _, r := range claim.Status.ReservedFor {
		if r.UID != pod.UID {
			return false, ""
		}
	}
	var share types.UID
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != protocol.DRADriver || r.ShareID == nil {
			return false, ""
		}
		share = *r.ShareID
	}
	return share != "", share
}

// ClaimRef ties one container's slice to the ResourceClaim request it came
// from, so that PreBind can write the allocation (docs/dra.md).
type ClaimRef struct {
	// PodClaim is the entry of pod.spec.resourceClaims.
	PodClaim  string
	Namespace string
	Name      string
	UID       types.UID
	// Request is the claim's request; Container the one container using it.
	Request   string
	Container string
}

// ClaimGetter reads a ResourceClaim of the pod's namespace (a lister);
// a claim that does not exist is an error that satisfies
// apierrors.IsNotFound or is nil with a nil claim.
type ClaimGetter func(namespace, name string) (*resourceapi.ResourceClaim, error)

// UsesClaims reports whether the pod references any ResourceClaim.
func UsesClaims(pod *v1.Pod) bool { return len(pod.Spec.ResourceClaims) > 0 }

// ParseClaims is the qGPU request a pod makes through ResourceClaims of the
// qGPU DeviceClasses (docs/dra.md#writing-a-claim): one request per claim,
// exactly one device, capacity memory (whole GiB) and cores, each claim used
// by one container, all claims of one class. It returns nil when the pod
// references no qGPU DeviceClass, an error wrapping ErrInvalid for a claim
// that can never be placed as written (naming the claim, the field and the
// value), and one wrapping ErrClaimPending for one not ready yet.
func ParseClaims(pod *v1.Pod, get ClaimGetter) (*Request, error) {
	if Asks(pod) {
		return nil, invalidf("pod asks for qGPU both by extended resources and by ResourceClaims: use one (docs/dra.md)")
	}
	users := claimUsers(pod)
	req := &Request{}
	var err error
	if req.UseTypes, req.NoUseTypes, err = modelFilters(pod); err != nil {
		return nil, err
	}
	for _, pc := range pod.Spec.ResourceClaims {
		claim, err := podClaim(pod, pc, get)
		if err != nil {
			return nil, err
		}
		if claim == nil {
			continue
		}
		if shared, ok, err := sharedClaim(pod, claim, pc.Name, users[pc.Name]); err != nil || ok {
			if err != nil {
				return nil, err
			}
			if req.Class != "" && shared.class != req.Class {
				return nil, invalidf("resourceClaims[%s]: class %s: every qGPU claim of a pod has one class, and another claim is %s", pc.Name, shared.class, req.Class)
			}
			req.Class = shared.class
			req.Shared = append(req.Shared, shared.SharedClaim)
			continue
		}
		ref, c, class, ok, err := claimSlice(pod, claim, pc.Name, users[pc.Name])
		if err != nil {
			return nil, err
		}
		if !ok {
			req.OtherClaims = append(req.OtherClaims, pc.Name)
			continue
		}
		if req.Class != "" && class != req.Class {
			return nil, invalidf("resourceClaims[%s]: class %s: every qGPU claim of a pod has one class, and another claim is %s", pc.Name, class, req.Class)
		}
		req.Class = class
		req.Containers = append(req.Containers, c)
		req.Claims = append(req.Claims, ref)
	}
	if len(req.Shared) > 0 {
		if len(req.Containers) > 0 {
			return nil, invalidf("resourceClaims[%s]: already allocated for another pod, while resourceClaims[%s] is not: "+
				"a pod joins claims other pods hold, or has claims of its own allocated, not both (docs/dra.md#shared-claims)",
				req.Shared[0].Ref.PodClaim, req.Claims[0].PodClaim)
		}
		return req, nil
	}
	if len(req.Containers) == 0 {
		return nil, nil
	}
	if value, present := pod.Annotations[protocol.AnnotationAppClass]; present && protocol.Class(value) != req.Class {
		return nil, invalidf("annotation %s: value %q disagrees with the claims' DeviceClass (%s): drop the annotation", protocol.AnnotationAppClass, value, protocol.DRADeviceClass(req.Class))
	}
	return req, checkPod(req)
}

// SharedClaim is a qGPU claim another pod's cycle allocated, which this pod
// joins: on Node, as long as the allocation still has Share.
type SharedClaim struct {
	Ref   ClaimRef
	Node  string
	Share types.UID
}

type sharedClaimOf struct {
	SharedClaim
	class protocol.Class
}

// sharedClaim reads an allocated qGPU claim the pod may join: allocated by
// qGPU (its driver's results, with a share ID) for other pods (not stale
// for this one), with room in reservedFor. ok is false for any other claim,
// which claimSlice then judges as before. The claim must be one the pod
// could have had allocated itself (claimSlice's rules).
func sharedClaim(pod *v1.Pod, claim *resourceapi.ResourceClaim, podClaim string, users []string) (sharedClaimOf, bool, error) {
	if claim.Status.Allocation == nil || len(claim.Status.ReservedFor) >= resourceapi.ResourceClaimReservedForMaxSize {
		return sharedClaimOf{}, false, nil
	}
	if stale, _ := staleFor(claim, pod); stale {
		return sharedClaimOf{}, false, nil
	}
	hold, held := protocol.HeldByClaim(claim)
	var share types.UID
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == protocol.DRADriver && r.ShareID != nil {
			share = *r.ShareID
		}
	}
	if !held || share == "" {
		return sharedClaimOf{}, false, nil
	}
	shape := claim.DeepCopy()
	shape.Status = resourceapi.ResourceClaimStatus{}
	ref, _, class, ok, err := claimSlice(pod, shape, podClaim, users)
	if err != nil || !ok {
		return sharedClaimOf{}, false, err
	}
	return sharedClaimOf{SharedClaim: SharedClaim{Ref: ref, Node: hold.Node, Share: share}, class: class}, true, nil
}

// claimUsers maps each pod claim name to the containers that use it.
func claimUsers(pod *v1.Pod) map[string][]string {
	users := map[string][]string{}
	for _, c := range pod.Spec.InitContainers {
		for _, rc := range c.Resources.Claims {
			users[rc.Name] = append(users[rc.Name], "initContainers["+c.Name+"]")
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, rc := range c.Resources.Claims {
			users[rc.Name] = append(users[rc.Name], c.Name)
		}
	}
	return users
}

// podClaim reads the ResourceClaim behind one pod.spec.resourceClaims
// entry; nil when a template produced none.
func podClaim(pod *v1.Pod, pc v1.PodResourceClaim, get ClaimGetter) (*resourceapi.ResourceClaim, error) {
	name := pc.ResourceClaimName
	if name == nil {
		if pc.ResourceClaimTemplateName == nil {
			return nil, invalidf("resourceClaims[%s]: neither resourceClaimName nor resourceClaimTemplateName is set", pc.Name)
		}
		found := false
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == pc.Name {
				name, found = st.ResourceClaimName, true
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: resourceClaims[%s]: the claim of template %s is not created yet", ErrClaimPending, pc.Name, *pc.ResourceClaimTemplateName)
		}
		if name == nil {
			return nil, nil
		}
	}
	claim, err := get(pod.Namespace, *name)
	if err != nil || claim == nil {
		return nil, fmt.Errorf("%w: resourceClaims[%s]: ResourceClaim %s/%s: not found yet (%v)", ErrClaimPending, pc.Name, pod.Namespace, *name, err)
	}
	if pc.ResourceClaimTemplateName != nil && !ownedBy(claim, pod) {
		return nil, invalidf("resourceClaims[%s]: ResourceClaim %s was not generated for this pod", pc.Name, claim.Name)
	}
	return claim, nil
}

func ownedBy(claim *resourceapi.ResourceClaim, pod *v1.Pod) bool {
	for _, o := range claim.OwnerReferences {
		if o.UID == pod.UID {
			return true
		}
	}
	return false
}

// claimSlice reads one claim: ok is false when it asks for no qGPU class.
func claimSlice(pod *v1.Pod, claim *resourceapi.ResourceClaim, podClaim string, users []string) (ClaimRef, Container, protocol.Class, bool, error) {
	ref := ClaimRef{PodClaim: podClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
	at := "ResourceClaim " + claim.Name
	reqs := claim.Spec.Devices.Requests
	qgpu := 0
	for _, r := range reqs {
		if r.Exactly != nil {
			if _, ok := protocol.DRAClassOf(r.Exactly.DeviceClassName); ok {
				qgpu++
			}
		}
		for _, sub := range r.FirstAvailable {
			if _, ok := protocol.DRAClassOf(sub.DeviceClassName); ok {
				return ref, Container{}, "", false, invalidf("%s: requests[%s].firstAvailable: qGPU device classes are not supported in subrequests", at, r.Name)
			}
		}
	}
	if qgpu == 0 {
		return ref, Container{}, "", false, nil
	}
	if len(reqs) != 1 {
		return ref, Container{}, "", false, invalidf("%s: requests: %d requests: a qGPU claim holds exactly one request (one slice); write one claim per slice", at, len(reqs))
	}
	if err := checkClaimExtras(claim, at); err != nil {
		return ref, Container{}, "", false, err
	}
	if len(users) != 1 {
		return ref, Container{}, "", false, invalidf("resourceClaims[%s]: used by %d containers %v: a qGPU claim is used by exactly one container", podClaim, len(users), users)
	}
	if strings.HasPrefix(users[0], "initContainers[") {
		return ref, Container{}, "", false, invalidf("resourceClaims[%s]: used by %s: qGPU claims serve app containers only", podClaim, users[0])
	}
	if claim.Status.Allocation != nil {
		stale, share := staleFor(claim, pod)
		return ref, Container{}, "", false, &AllocatedClaimError{Ref: ref, Stale: stale, Share: share}
	}
	r := reqs[0]
	ref.Request, ref.Container = r.Name, users[0]
	class, _ := protocol.DRAClassOf(r.Exactly.DeviceClassName)
	c, err := exactSlice(r.Exactly, class, at+": requests["+r.Name+"]", users[0])
	return ref, c, class, err == nil, err
}

// checkClaimExtras refuses what a qGPU claim cannot carry yet.
func checkClaimExtras(claim *resourceapi.ResourceClaim, at string) error {
	d := claim.Spec.Devices
	if len(d.Constraints) > 0 {
		return invalidf("%s: constraints: not supported for qGPU claims (one device per claim)", at)
	}
	if len(d.Config) > 0 {
		return invalidf("%s: config: not supported for qGPU claims: the class comes from the DeviceClass", at)
	}
	return nil
}

// exactSlice applies the class rules of docs/design.md#what-a-pod-asks-for
// to one request's consumed capacity.
func exactSlice(r *resourceapi.ExactDeviceRequest, class protocol.Class, at, container string) (Container, error) {
	switch {
	case r.AllocationMode != "" && r.AllocationMode != resourceapi.DeviceAllocationModeExactCount:
		return Container{}, invalidf("%s: allocationMode: value %q: a qGPU request takes exactly one device", at, r.AllocationMode)
	case r.Count > 1:
		return Container{}, invalidf("%s: count: value %d: a qGPU request takes exactly one device (one claim per card)", at, r.Count)
	case r.AdminAccess != nil && *r.AdminAccess:
		return Container{}, invalidf("%s: adminAccess: not supported for qGPU devices", at)
	case len(r.Selectors) > 0:
		return Container{}, invalidf("%s: selectors: not supported yet; choose models with the annotations %s and %s", at, protocol.AnnotationUseGPUType, protocol.AnnotationNoUseGPUType)
	case len(r.Tolerations) > 0:
		return Container{}, invalidf("%s: tolerations: not supported for qGPU devices", at)
	case r.Capacity == nil:
		return Container{}, invalidf("%s: capacity: missing: a qGPU request consumes %s (whole GiB) and, for general and offline claims, %s", at, protocol.DRACapacityMemory, protocol.DRACapacityCores)
	}
	asks := r.Capacity.Requests
	for name := range asks {
		if name != protocol.DRACapacityMemory && name != protocol.DRACapacityCores {
			return Container{}, invalidf("%s: capacity.requests[%s]: unknown capacity: qGPU devices have %s and %s", at, name, protocol.DRACapacityMemory, protocol.DRACapacityCores)
		}
	}
	mem, err := memoryGiB(asks, at)
	if err != nil {
		return Container{}, err
	}
	out := Container{Name: container, MemoryGiB: mem, Cards: 1}
	cores, hasCores := asks[protocol.DRACapacityCores]
	n, ok := cores.AsInt64()
	if hasCores && (!ok || n < 0) {
		return Container{}, invalidf("%s: capacity.requests[%s]: value %s must be a whole number of percent", at, protocol.DRACapacityCores, cores.String())
	}
	switch class {
	case protocol.ClassGeneral:
		if n < 1 || n > protocol.CoresPerCard {
			return Container{}, invalidf("%s: capacity.requests[%s]: value %d must be between 1 and 100 (100: the whole card)", at, protocol.DRACapacityCores, n)
		}
		out.Cores, out.Whole = n, n == protocol.CoresPerCard
	case protocol.ClassOnline:
		if hasCores && n != 0 {
			return Container{}, invalidf("%s: capacity.requests[%s]: value %d: online claims consume %s only", at, protocol.DRACapacityCores, n, protocol.DRACapacityMemory)
		}
	default:
		if n < 1 || n > protocol.CoresPerCard {
			return Container{}, invalidf("%s: capacity.requests[%s]: value %d must be between 1 and 100 (the offline claim's greedy share)", at, protocol.DRACapacityCores, n)
		}
		out.Cores = n
	}
	return out, nil
}

// memoryGiB reads the memory a request consumes: whole GiB, at least one.
func memoryGiB(asks map[resourceapi.QualifiedName]resource.Quantity, at string) (int64, error) {
	q, ok := asks[protocol.DRACapacityMemory]
	if !ok {
		return 0, invalidf("%s: capacity.requests[%s]: missing: every qGPU claim consumes memory (1Gi to %dGi)", at, protocol.DRACapacityMemory, MaxMemoryGiB)
	}
	const gib = 1 << 30
	b, exact := q.AsInt64()
	if !exact || b%gib != 0 || b < gib || b/gib > MaxMemoryGiB {
		return 0, invalidf("%s: capacity.requests[%s]: value %s must be whole GiB between 1Gi and %dGi", at, protocol.DRACapacityMemory, q.String(), MaxMemoryGiB)
	}
	return b / gib, nil
}

// FromAssignment is the request of a pod that asked through
// ResourceClaims, read back from its assignment (one slice per container):
// for readers without the claims (the learner after a restart, kubectl
// qgpu), which may be deallocated already. nil for another shape.
func FromAssignment(a *protocol.Assignment) *Request {
	req := &Request{Class: a.Class}
	for _, c := range a.Containers {
		if len(c.Slices) != 1 {
			return nil
		}
		s := c.Slices[0]
		req.Containers = append(req.Containers, Container{Name: c.Name, MemoryGiB: s.MemoryGiB, Cores: s.Cores, Cards: 1,
			Whole: a.Class == protocol.ClassGeneral && s.Cores == protocol.CoresPerCard})
	}
	return req
}
