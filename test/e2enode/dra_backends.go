package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/e2enode/verify"
)

// The DRA leg on every backend, a shared claim and another driver's
// claim (docs/real-node.md#the-dra-leg-teste2enodedrago).

// draBackendVariants are the probe pods of a backend phase, each with a
// claim from the template "slice" (general, 4 GiB, 30 cores: three fit
// one T4, and under mps every slice on a card is the same, so the card's
// ceiling is each one's slice): plain, overriding every variable as root,
// and overriding as uid 65534, as the device-plugin leg's variants.
var draBackendVariants = []variant{{name: "plain"}, {name: "override", override: true}, {name: "nonroot", override: true, nonRoot: true}}

// setsOwnEnv: the pod's container sets variables of its own (an
// overriding variant), so its variables do not tell its backend.
func setsOwnEnv(p *corev1.Pod) bool {
	return len(p.Spec.Containers) > 0 && len(p.Spec.Containers[0].Env) > 0
}

// checkBackend relabels the emptied node to backend (policy fixed-share,
// as the device-plugin leg does, so that every limit applies), runs the
// variants' claims and checks each from inside its container
// (checkClaimPod: its allocation, claim spec, card, variables and the
// backend's delivery) and the overriding ones' escape attempts; the pods
// are left running for checkSharedClaim and checkUnprepared. false when
// the node could not be switched.
func (c *draChecker) checkBackend(backend string) bool {
	if err := labelNode(c.ctx, c.cp, c.n.name, map[string]string{protocol.LabelEnforcement: backend,
		protocol.LabelSchedulePolicy: string(protocol.PolicyFixedShare)}); err != nil {
		c.fail("labelling %s %s: %v", c.n.name, backend, err)
		return false
	}
	c.backend = backend
	c.logf("%s labelled %s, policy fixed-share", c.n.name, backend)
	if backend == "mps" {
		if err := waitMPSDaemon(c.ctx, c.cp, c.n); err != nil {
			c.fail("the MPS control daemon on %s: %v", c.n.name, err)
			return false
		}
	}
	var tally verify.Tally
	for _, v := range draBackendVariants {
		name := fmt.Sprintf("dra-%s-%s", backend, v.name)
		c.res.claims++
		p, err := c.runBackendClaim(name, v)
		if err != nil {
			c.fail("%s %s: %v", backend, name, err)
			continue
		}
		card, problems := c.checkClaimPod(p, protocol.ClassGeneral, 4, 30)
		var note string
		if v.override {
			lines, err := containerOutput(c.n.dir, p, "probe")
			if err != nil {
				problems = append(problems, err.Error())
			} else {
				t, escaped := escapeAttempts(backend, lines)
				tally.Add(t)
				problems = append(problems, escaped...)
				note = verify.EscapeSummary(lines)
			}
		}
		if len(problems) > 0 {
			c.fail("%s %s: %s", backend, name, strings.Join(problems, "; "))
			continue
		}
		c.ok("%s %s (general, 4 GiB, 30 cores) on card %d: allocated, prepared by the %s backend, its card, files, directories and variables in the container, none of the pod's own overrides%s%s",
			backend, name, card, backend, note, draBackendNote(backend))
	}
	fmt.Fprintf(c.out, "%s %s (dra): escape attempts %d refused %d\n", c.n.name, backend, tally.Attempts, tally.Refused)
	if tally.Attempts < minEscapeAttempts || tally.Refused != tally.Attempts {
		c.fail("%s %s: escape attempts %d refused %d (want at least %d, all refused)", c.n.name, backend, tally.Attempts, tally.Refused, minEscapeAttempts)
	}
	return true
}

func draBackendNote(backend string) string {
	switch backend {
	case "hami-core":
		return "; its HAMi-core region is its claim's"
	case "mps":
		return "; the MPS ceiling in force on its card is its slice"
	}
	return ""
}

// runBackendClaim creates the variant's pod, with a claim from the
// template "slice", and waits until it runs. The agent sees the node's new
// label through its informer, and the mps backend needs the control
// daemon the label brings: a plain pod whose claim was prepared before
// either (by the previous backend) is deleted and made again, with a new
// claim, a bounded number of times. The overriding variants run only after
// a plain one got the backend, so they are never retried.
func (c *draChecker) runBackendClaim(name string, v variant) (*corev1.Pod, error) {
	var last error
	for attempt := 1; attempt <= 6; attempt++ {
		p := c.claimPod(name, protocol.SchedulerName, false, podClaim{name: "gpu", template: "slice"})
		if v.override {
			p.Spec.Containers[0].Env = overrides()
		}
		if v.nonRoot {
			uid := int64(65534)
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: &uid, RunAsGroup: &uid}
		}
		if !c.create(p) {
			return nil, fmt.Errorf("not created")
		}
		p, err := c.waitRunning(name)
		if err == nil {
			var lines []verify.Line
			if lines, err = containerOutput(c.n.dir, p, "probe"); err == nil {
				if got := verify.Backend(lines); got == c.backend || v.override {
					return p, nil
				}
				err = fmt.Errorf("answered by the %s backend", verify.Backend(lines))
			}
		}
		if v.override {
			return p, err
		}
		last = fmt.Errorf("attempt %d: %w", attempt, err)
		c.logf("%s: retrying: %v", name, last)
		if err := deleteAndWait(c.ctx, c.cp, "app.kubernetes.io/part-of="+draLabel); err != nil {
			return nil, err
		}
	}
	return nil, last
}

// draDeliveryProblems is what the node's backend must have delivered to a
// claim's container beside its card and QGPU_* variables: the device-plugin
// leg's verdict for the backend (deliveryProblems), and what is the
// claim's rather than the container's: hami-core's region directory is
// <claim UID>_<request> (the containers that share a claim share it), and
// under mps the ceiling in force on the card is the slice.
func (c *draChecker) draDeliveryProblems(p *corev1.Pod, claim *resourceapi.ResourceClaim, lines []verify.Line, cores int64) []string {
	problems := deliveryProblems(c.backend, p, lines, cores)
	switch c.backend {
	case "hami-core":
		region := "/" + string(claim.UID) + "_gpu"
		i := slices.IndexFunc(lines, func(l verify.Line) bool { return l.Kind == "mount" && l.Target == "/tmp/vgpu" })
		if i < 0 || !strings.HasSuffix(lines[i].Root, region) {
			root := "none"
			if i >= 0 {
				root = lines[i].Root
			}
			problems = append(problems, fmt.Sprintf("/tmp/vgpu is %s, want the claim's region directory ...%s", root, region))
		}
	case "mps":
		problems = append(problems, mpsCeilingProblems(p, c.n)...)
	}
	return problems
}

// checkSharedClaim: one named ResourceClaim (general, 2 GiB, 20 cores)
// used by two pods, the second created once the first runs. Both must run
// on the allocation's node, reservedFor lists both, the allocation is the
// one the first pod got (device and share ID), the node prepared it once
// (one checkpoint entry and one claim spec, neither written again when the
// second pod started), both containers get the claim's slice (the second
// checked against the first's assignment: a pod that joins a claim has
// none of its own), and kubectl qgpu counts the slice once, with no
// violation. The pods and the claim are deleted; checkUnprepared then
// waits for the node to unprepare it.
func (c *draChecker) checkSharedClaim() {
	const claimName = "dra-shared"
	claims := c.cp.Client.ResourceV1().ResourceClaims(examplesNamespace)
	spec := claimTemplate(claimName, protocol.ClassGeneral, "2Gi", "20").Spec.Spec
	if _, err := claims.Create(c.ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: claimName, Namespace: examplesNamespace}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		c.fail("creating the shared claim %s: %v", claimName, err)
		return
	}
	defer func() {
		if err := deleteAndWait(c.ctx, c.cp, "app.kubernetes.io/part-of="+draLabel); err != nil {
			c.fail("deleting the shared claim's pods: %v", err)
		}
		if err := claims.Delete(c.ctx, claimName, metav1.DeleteOptions{}); err != nil {
			c.fail("deleting the shared claim %s: %v", claimName, err)
		}
	}()
	ref := podClaim{name: "gpu", claim: claimName}
	// The allocated pods of the backend phase are gone: the card holds
	// the shared slice only.
	if err := deleteAndWait(c.ctx, c.cp, "app.kubernetes.io/part-of="+draLabel); err != nil {
		c.fail("deleting the backend phase's pods: %v", err)
		return
	}
	c.res.claims++
	if !c.create(c.claimPod("dra-shared-1", protocol.SchedulerName, false, ref)) {
		return
	}
	first, err := c.waitRunning("dra-shared-1")
	if err != nil {
		c.fail("dra-shared-1: %v", err)
		return
	}
	card, problems := c.checkClaimPod(first, protocol.ClassGeneral, 2, 20)
	if len(problems) > 0 {
		c.fail("dra-shared-1 (claim %s): %s", claimName, strings.Join(problems, "; "))
		return
	}
	c.ok("dra-shared-1 (claim %s: general, 2 GiB, 20 cores) on card %d: allocated, prepared, checked in its container", claimName, card)
	before, err := claims.Get(c.ctx, claimName, metav1.GetOptions{})
	if err != nil {
		c.fail("claim %s: %v", claimName, err)
		return
	}
	prepared, err := c.preparedState(before.UID)
	if err != nil {
		c.fail("claim %s prepared for dra-shared-1: %v", claimName, err)
		return
	}

	c.res.claims++
	if !c.create(c.claimPod("dra-shared-2", protocol.SchedulerName, false, ref)) {
		return
	}
	second, err := c.waitRunning("dra-shared-2")
	if err != nil {
		c.fail("dra-shared-2 (joining claim %s): %v", claimName, err)
		return
	}
	// The second pod joined the claim: it holds no assignment of its
	// own, and its container must get the first one's slice.
	view := second.DeepCopy()
	if view.Annotations == nil {
		view.Annotations = map[string]string{}
	}
	view.Annotations[protocol.AnnotationAssignment] = first.Annotations[protocol.AnnotationAssignment]
	card2, problems := c.checkClaimPod(view, protocol.ClassGeneral, 2, 20)
	after, err := claims.Get(c.ctx, claimName, metav1.GetOptions{})
	if err != nil {
		problems = append(problems, fmt.Sprintf("claim %s: %v", claimName, err))
	} else {
		problems = append(problems, sharedProblems(before, after, c.n.name, first, second)...)
		if now, err := c.preparedState(after.UID); err != nil {
			problems = append(problems, err.Error())
		} else if now != prepared {
			problems = append(problems, fmt.Sprintf("the node prepared the claim again when dra-shared-2 started: checkpoint and spec %+v, then %+v", prepared, now))
		}
	}
	if card2 != card {
		problems = append(problems, fmt.Sprintf("dra-shared-2 on card %d, dra-shared-1 on card %d", card2, card))
	}
	problems = append(problems, c.countedOnce(card, 2, 20)...)
	if len(problems) > 0 {
		c.fail("dra-shared-2 (joining claim %s): %s", claimName, strings.Join(problems, "; "))
		return
	}
	c.ok("dra-shared-2 joined claim %s on %s card %d: reservedFor lists both pods, the allocation (share ID) unchanged, the node prepared it once (one checkpoint entry, one claim spec, neither rewritten), the claim's slice in both containers, kubectl qgpu counts 2 GiB and 20 cores once, no violation",
		claimName, c.n.name, card)
}

// sharedProblems compares the shared claim after the second pod joined
// with before: the same allocation, both pods (and only they) in
// reservedFor, both on the allocation's node.
func sharedProblems(before, after *resourceapi.ResourceClaim, node string, pods ...*corev1.Pod) []string {
	var problems []string
	if before.UID != after.UID || before.Status.Allocation == nil || after.Status.Allocation == nil ||
		len(after.Status.Allocation.Devices.Results) != 1 ||
		!sameResult(before.Status.Allocation.Devices.Results[0], after.Status.Allocation.Devices.Results[0]) {
		problems = append(problems, fmt.Sprintf("claim %s: allocation %+v, then %+v: want it unchanged", after.Name, before.Status.Allocation, after.Status.Allocation))
	}
	var reserved []types.UID
	for _, r := range after.Status.ReservedFor {
		reserved = append(reserved, r.UID)
	}
	for _, p := range pods {
		if !slices.Contains(reserved, p.UID) {
			problems = append(problems, fmt.Sprintf("claim %s: %s is not in reservedFor %v", after.Name, p.Name, reserved))
		}
		if p.Spec.NodeName != node {
			problems = append(problems, fmt.Sprintf("%s on node %q, the allocation's is %s", p.Name, p.Spec.NodeName, node))
		}
	}
	if len(reserved) != len(pods) {
		problems = append(problems, fmt.Sprintf("claim %s: reservedFor %v, want the %d pods", after.Name, reserved, len(pods)))
	}
	return problems
}

func sameResult(a, b resourceapi.DeviceRequestAllocationResult) bool {
	return a.Driver == b.Driver && a.Pool == b.Pool && a.Device == b.Device && a.ShareID != nil && b.ShareID != nil && *a.ShareID == *b.ShareID
}

// preparedState is what the node holds of a prepared claim: its entries
// in the agent's checkpoint (the whole file, which any prepare or unprepare
// rewrites) and its one claim spec's modification time.
type preparedState struct {
	entries    int
	checkpoint string
	spec       string
	specTime   time.Time
}

func (c *draChecker) preparedState(uid types.UID) (preparedState, error) {
	var s preparedState
	ckpt, err := checkpointed(c.n.dir)
	if err != nil {
		return s, err
	}
	s.entries = ckpt[uid]
	raw, err := os.ReadFile(filepath.Join(c.n.dir, "kubelet", "plugins", protocol.DRADriver, "checkpoint.json"))
	if err != nil {
		return s, err
	}
	s.checkpoint = string(raw)
	files := claimSpecFiles(c.n.dir, uid)
	if s.entries != 1 || len(files) != 1 {
		return s, fmt.Errorf("claim %s: %d checkpoint entries, specs %v: want one of each", uid, s.entries, files)
	}
	fi, err := os.Stat(files[0])
	if err != nil {
		return s, err
	}
	s.spec, s.specTime = files[0], fi.ModTime()
	return s, nil
}

// countedOnce runs kubectl qgpu (make build's bin/kubectl-qgpu) as an
// administrator would: check must find no violation, and nodes must count
// the node's only slice once on its card.
func (c *draChecker) countedOnce(card int, memoryGiB, cores int64) []string {
	var problems []string
	var report struct {
		Violations []struct{ Reason, Object, Message string } `json:"violations"`
	}
	if err := c.kubectlQGPU(&report, "check", "-o", "json"); err != nil {
		problems = append(problems, err.Error())
	} else if len(report.Violations) > 0 {
		problems = append(problems, fmt.Sprintf("kubectl qgpu check: violations %+v", report.Violations))
	}
	var nodes struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
			Cards    []struct {
				Index         int   `json:"index"`
				UsedMemoryGiB int64 `json:"usedMemoryGiB"`
				UsedCores     int64 `json:"usedCores"`
			} `json:"cards"`
		} `json:"items"`
	}
	if err := c.kubectlQGPU(&nodes, "nodes", "-o", "json"); err != nil {
		return append(problems, err.Error())
	}
	found := false
	for _, n := range nodes.Items {
		if n.Metadata.Name != c.n.name {
			continue
		}
		found = true
		for _, cd := range n.Cards {
			wantMem, wantCores := int64(0), int64(0)
			if cd.Index == card {
				wantMem, wantCores = memoryGiB, cores
			}
			if cd.UsedMemoryGiB != wantMem || cd.UsedCores != wantCores {
				problems = append(problems, fmt.Sprintf("kubectl qgpu nodes: %s card %d holds %d GiB and %d cores, want %d and %d (the shared slice once)",
					c.n.name, cd.Index, cd.UsedMemoryGiB, cd.UsedCores, wantMem, wantCores))
			}
		}
	}
	if !found {
		problems = append(problems, "kubectl qgpu nodes: no node "+c.n.name)
	}
	return problems
}

// kubectlQGPU runs bin/kubectl-qgpu with the administrator's kubeconfig
// and decodes its JSON output into out.
func (c *draChecker) kubectlQGPU(out any, args ...string) error {
	ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
	defer cancel()
	args = append([]string{"--kubeconfig", filepath.Join(c.o.workDir, "admin.kubeconfig")}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(c.o.repoBin, "kubectl-qgpu"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl qgpu %s: %v: %s%s", strings.Join(args[2:], " "), err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("kubectl qgpu %s: %v: %s", strings.Join(args[2:], " "), err, stdout.String())
	}
	return nil
}

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
