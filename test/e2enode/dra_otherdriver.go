package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// The DRA leg's claim of another driver beside a slice
// (docs/real-node.md#the-dra-leg-teste2enodedrago).

// nicDriver is the DRA leg's second, test, driver: a DeviceClass of its
// own and a ResourceSlice with one device on the node, published by the
// test (no kubelet plugin serves it).
const nicDriver = "nic.e2e.qgpu.io"

// checkOtherDriver checks what becomes of another driver's claim
// (docs/dra.md#the-scheduler-profile): beside a qGPU claim in one pod,
// qgpu-scheduler refuses the pod in PreFilter naming that claim, and
// neither claim is allocated; alone in a qgpu-scheduler pod, it is refused
// for want of DynamicResources in the profile. A default-scheduler pod
// with the same claim is the control: the default scheduler's
// DynamicResources allocates the driver's device on the node, so the
// refusals are qgpu-scheduler's policy, not a claim nothing could serve.
func (c *draChecker) checkOtherDriver() {
	if err := c.publishNIC(); err != nil {
		c.fail("the test driver %s: %v", nicDriver, err)
		return
	}
	gpu, nic := podClaim{name: "gpu", template: "slice"}, podClaim{name: "nic", template: "nic"}
	if c.create(c.claimPod("dra-nic-beside", protocol.SchedulerName, true, gpu, nic)) {
		c.checkUnallocated("dra-nic-beside", "a qGPU claim beside a claim of "+nicDriver,
			"resourceClaims[nic]: names no qGPU DeviceClass")
	}
	if c.create(c.claimPod("dra-nic-only", protocol.SchedulerName, true, nic)) {
		c.checkUnallocated("dra-nic-only", "a qgpu-scheduler pod with a claim of "+nicDriver+" only",
			"name no qGPU DeviceClass, and this profile does not run DynamicResources")
	}
	if c.create(c.claimPod("dra-nic-control", corev1.DefaultSchedulerName, true, nic)) {
		c.checkNICAllocated("dra-nic-control")
	}
	// The control's kubelet cannot prepare the claim (no plugin serves
	// the test driver): force, so that its deletion does not wait on it.
	zero := int64(0)
	if err := c.cp.Client.CoreV1().Pods(examplesNamespace).Delete(c.ctx, "dra-nic-control", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		c.fail("deleting dra-nic-control: %v", err)
	}
	if err := deleteAndWait(c.ctx, c.cp, "app.kubernetes.io/part-of="+draLabel); err != nil {
		c.fail("deleting the pods of the test driver's claims: %v", err)
	}
}

// publishNIC creates the test driver's DeviceClass, a ResourceSlice of
// one device nic-0 in the node's pool, and the template "nic".
func (c *draChecker) publishNIC() error {
	rc := c.cp.Client.ResourceV1()
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: nicDriver}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + nicDriver + `"`}}}}}
	if _, err := rc.DeviceClasses().Create(c.ctx, class, metav1.CreateOptions{}); err != nil {
		return err
	}
	node := c.n.name
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-nic"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: nicDriver, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}, NodeName: &node,
		Devices: []resourceapi.Device{{Name: "nic-0"}}}}
	if _, err := rc.ResourceSlices().Create(c.ctx, slice, metav1.CreateOptions{}); err != nil {
		return err
	}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "nic", Namespace: examplesNamespace},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: nicDriver}}}}}}}
	_, err := rc.ResourceClaimTemplates(examplesNamespace).Create(c.ctx, tmpl, metav1.CreateOptions{})
	return err
}

// checkNICAllocated waits (bounded) for the default scheduler to allocate
// the control pod's claim: the test driver's nic-0 in the node's pool.
func (c *draChecker) checkNICAllocated(name string) {
	var last string
	err := wait.PollUntilContextTimeout(c.ctx, 2*time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.cp.Client.CoreV1().Pods(examplesNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		claim, err := c.podClaim(p, "nic")
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if a := claim.Status.Allocation; a != nil && len(a.Devices.Results) == 1 {
			r := a.Devices.Results[0]
			if r.Driver == nicDriver && r.Pool == c.n.name && r.Device == "nic-0" && p.Spec.NodeName == c.n.name {
				return true, nil
			}
			last = fmt.Sprintf("allocated %s/%s/%s, pod on %q", r.Driver, r.Pool, r.Device, p.Spec.NodeName)
			return false, nil
		}
		last = "claim " + claim.Name + " unallocated; events: " + c.events(name)
		return false, nil
	})
	if err != nil {
		c.fail("%s (control: a default-scheduler pod with a claim of %s): not allocated %s/%s/nic-0 within 90s: %s", name, nicDriver, nicDriver, c.n.name, last)
		return
	}
	c.ok("%s (control): the default scheduler allocated %s's nic-0 on %s to a claim of the test driver", name, nicDriver, c.n.name)
}
