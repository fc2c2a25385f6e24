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

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// The DRA leg's shared claim (docs/real-node.md#the-dra-leg-teste2enodedrago).

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
