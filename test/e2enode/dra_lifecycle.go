package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The DRA leg's checks of the node's state over time: the agent restarted
// under prepared claims, and claims unprepared once their pods are gone.

// restartAgent deletes the DRA agent's pod and waits for the DaemonSet's
// new one to be Ready; the running pods must keep running, unrestarted,
// their claims' specs and checkpoint entries still on the node.
func (c *draChecker) restartAgent(running ...string) {
	onNode := metav1.ListOptions{LabelSelector: "app=" + draAgentApp, FieldSelector: "spec.nodeName=" + c.n.name}
	pods := c.cp.Client.CoreV1().Pods(systemNamespace)
	before, err := pods.List(c.ctx, onNode)
	if err != nil || len(before.Items) != 1 {
		c.fail("the DRA agent's pod on %s: %v (%d pods)", c.n.name, err, len(before.Items))
		return
	}
	old := before.Items[0].UID
	if err := pods.Delete(c.ctx, before.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		c.fail("deleting the DRA agent's pod: %v", err)
		return
	}
	err = wait.PollUntilContextTimeout(c.ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, onNode)
		return err == nil && len(list.Items) == 1 && list.Items[0].UID != old && podReady(&list.Items[0]), nil
	})
	if err != nil {
		c.fail("no new DRA agent pod Ready on %s: %v", c.n.name, err)
		return
	}
	c.logf("the DRA agent on %s restarted", c.n.name)
	ckpt, err := checkpointed(c.n.dir)
	if err != nil {
		c.fail("after the agent's restart: %v", err)
		return
	}
	var problems []string
	for _, name := range running {
		p, err := c.cp.Client.CoreV1().Pods(examplesNamespace).Get(c.ctx, name, metav1.GetOptions{})
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if !podReady(p) || restarts(p) != 0 {
			problems = append(problems, fmt.Sprintf("%s: ready %v, restarts %d", name, podReady(p), restarts(p)))
		}
		uid := c.prepared[name]
		if uid == "" || len(claimSpecFiles(c.n.dir, uid)) != 1 || ckpt[uid] != 1 {
			problems = append(problems, fmt.Sprintf("%s: claim %q: specs %v, in the checkpoint %v", name, uid, claimSpecFiles(c.n.dir, uid), ckpt[uid]))
		}
	}
	if len(problems) > 0 {
		c.fail("after the agent's restart: %s", strings.Join(problems, "; "))
		return
	}
	c.ok("the DRA agent restarted; %s kept running, their claims' specs and checkpoint entries kept", strings.Join(running, ", "))
}

// checkUnprepared deletes the leg's pods and waits (bounded) until the
// kubelet had the agent unprepare their claims (specs and checkpoint
// entries gone) and the resource-claim controller deleted the claims it
// made from the templates.
func (c *draChecker) checkUnprepared() {
	if err := deleteAndWait(c.ctx, c.cp, "app.kubernetes.io/part-of="+draLabel); err != nil {
		c.fail("deleting the leg's pods: %v", err)
		return
	}
	var left []string
	err := wait.PollUntilContextTimeout(c.ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		left = left[:0]
		ckpt, err := checkpointed(c.n.dir)
		if err != nil {
			left = append(left, err.Error())
			return false, nil
		}
		for name, uid := range c.prepared {
			if files := claimSpecFiles(c.n.dir, uid); len(files) > 0 || ckpt[uid] > 0 {
				left = append(left, fmt.Sprintf("%s's claim %s: specs %v, in the checkpoint %v", name, uid, files, ckpt[uid]))
			}
		}
		claims, err := c.cp.Client.ResourceV1().ResourceClaims(examplesNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, cl := range claims.Items {
			if c.isPrepared(cl.UID) {
				left = append(left, "claim "+cl.Name+" not deleted by the resource-claim controller")
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		c.fail("90s after the pods were deleted: %s", strings.Join(left, "; "))
		return
	}
	c.ok("the pods deleted: the agent unprepared their %d claims (CDI specs and checkpoint entries gone), the resource-claim controller deleted them", len(c.prepared))
}

func (c *draChecker) isPrepared(uid types.UID) bool {
	for _, u := range c.prepared {
		if u == uid {
			return true
		}
	}
	return false
}
