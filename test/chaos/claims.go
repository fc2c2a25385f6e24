package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// DRA pods (docs/dra.md, docs/reliability.md#dra-pods-in-the-chaos-runs):
// in every run, one random pod in claimEvery asks for its
// slice through a ResourceClaim of a qGPU DeviceClass instead of the
// extended resources. The scheduler allocates the claim in PreBind, before
// Bind, so a kill, a lost lease or a failed binding can leave a claim
// allocated for a pod that is not bound. The runs add two DRA nodes
// (chaosNodes), where the claimed pods go: their hollow kubelets run the
// kubelet's DRA manager and their agents serve the driver gpu.qgpu.io, so
// the kubelet has each claim prepared when its pod starts and unprepared
// when it ends (checkPrepared judges the result).

// claimEvery: one random pod in claimEvery asks through a claim.
const claimEvery = 4

// draGate is the apiserver flag without which the claims' consumed
// capacity is dropped and the scheduler refuses to bind (docs/dra.md#feature-gates).
const draGate = "--feature-gates=DRAConsumableCapacity=true"

// prepareDRA turns the gate on for every run's apiserver: runs without
// claimed pods serve the same API.
func prepareDRA(c *harness.ClusterOptions) {
	c.APIServerFlags = append(c.APIServerFlags, draGate)
}

// claimedPod is pod i asking through a ResourceClaim named after it, with
// the shapes newPod draws per class: general 1–3 GiB and 5–34 cores or a
// whole 8 GiB card, online memory only (the mixed node), offline memory
// and a greedy share.
func (e *env) claimedPod(i int) (*corev1.Pod, *resourceapi.ResourceClaim) {
	name := fmt.Sprintf("p-%05d", i)
	r := e.rng
	var claim *resourceapi.ResourceClaim
	switch k := r.Intn(10); {
	case k < 4:
		claim = newClaim(name, protocol.ClassGeneral, 1+r.Int63n(3), 5+r.Int63n(30))
	case k == 4:
		claim = newClaim(name, protocol.ClassGeneral, 8, protocol.CoresPerCard)
	case k < 8:
		claim = newClaim(name, protocol.ClassOnline, 1+r.Int63n(4), 0)
	default:
		claim = newClaim(name, protocol.ClassOffline, 1+r.Int63n(4), 10+r.Int63n(50))
	}
	p := claimPod(ns, name)
	if len(e.schedulers) > 0 {
		p.Spec.SchedulerName = e.schedulers[i%len(e.schedulers)]
	}
	return p, claim
}

// newClaim is a claim of one request consuming memoryGiB and, when
// positive, cores of one device of the class.
func newClaim(name string, c protocol.Class, memoryGiB, cores int64) *resourceapi.ResourceClaim {
	caps := map[resourceapi.QualifiedName]resource.Quantity{protocol.DRACapacityMemory: *resource.NewQuantity(memoryGiB<<30, resource.BinarySI)}
	if cores > 0 {
		caps[protocol.DRACapacityCores] = *resource.NewQuantity(cores, resource.DecimalSI)
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: protocol.DRADeviceClass(c),
				Capacity: &resourceapi.CapacityRequirements{Requests: caps}},
		}}}},
	}
}

// dropClaim deletes the claim of a deleted pod and does for it what
// kube-controller-manager's resource-claim controller (which chaos does
// not run) does once the pod is gone: it takes the allocation back and
// removes the finalizer the scheduler added. The deletion comes first, so
// that a scheduler still writing the claim for the gone pod is refused
// (a claim being deleted is never allocated again).
func (e *env) dropClaim(ctx context.Context, name string) error {
	api := e.cs.ResourceV1().ResourceClaims(ns)
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting claim %s: %w", name, err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c.Status.Allocation != nil || len(c.Status.ReservedFor) > 0 {
			c.Status.Allocation, c.Status.ReservedFor = nil, nil
			if c, err = api.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		if !slices.Contains(c.Finalizers, resourceapi.Finalizer) {
			return nil
		}
		c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == resourceapi.Finalizer })
		_, err = api.Update(ctx, c, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing claim %s of a deleted pod: %w", name, err)
	}
	return nil
}

// dropAllClaims drops every claim of the run's namespace (the probe
// deleted every pod).
func (e *env) dropAllClaims(ctx context.Context) error {
	claims, err := e.cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range claims.Items {
		errs = append(errs, e.dropClaim(ctx, c.Name))
	}
	e.dropped += len(claims.Items)
	return errors.Join(errs...)
}

// qgpuAllocated reports whether the claim holds an allocation of driver
// gpu.qgpu.io.
func qgpuAllocated(c *resourceapi.ResourceClaim) bool {
	if c.Status.Allocation == nil {
		return false
	}
	return slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return r.Driver == protocol.DRADriver
	})
}

// allocationString is a claim's qGPU allocation in one line.
func allocationString(c *resourceapi.ResourceClaim) string {
	if c.Status.Allocation == nil {
		return "not allocated"
	}
	var s string
	for _, r := range c.Status.Allocation.Devices.Results {
		mem, cores := r.ConsumedCapacity[protocol.DRACapacityMemory], r.ConsumedCapacity[protocol.DRACapacityCores]
		s += fmt.Sprintf("%s/%s memory %s cores %s; ", r.Pool, r.Device, mem.String(), cores.String())
	}
	var reserved []string
	for _, r := range c.Status.ReservedFor {
		reserved = append(reserved, r.Name+" "+string(r.UID))
	}
	return fmt.Sprintf("%sreserved for %v", s, reserved)
}

// probeClaim is a whole card of gib GiB asked through a claim of the
// general class in the probe's namespace.
func probeClaim(name string, gib int64) *resourceapi.ResourceClaim {
	c := newClaim(name, protocol.ClassGeneral, gib, protocol.CoresPerCard)
	c.Namespace = probeNS
	return c
}

// claimPod is pod namespace/name whose one container uses the claim of
// the same name.
func claimPod(namespace, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			SchedulerName:  protocol.SchedulerName,
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}},
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
		},
	}
}
