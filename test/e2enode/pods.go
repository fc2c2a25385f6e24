package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// Waiting on, deleting and relabelling the objects the checks create.

// waitPodSettled waits until the pod of examplesNamespace runs, or fails (a
// refused Allocate).
func waitPodSettled(ctx context.Context, cp *harness.ControlPlane, name string) (*corev1.Pod, error) {
	return waitPodSettledIn(ctx, cp, examplesNamespace, name)
}

// waitPodSettledIn is waitPodSettled for a pod of namespace ns.
func waitPodSettledIn(ctx context.Context, cp *harness.ControlPlane, ns, name string) (*corev1.Pod, error) {
	var p *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if p, err = cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod failed: %s %s", p.Status.Reason, p.Status.Message)
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})
	return p, err
}

// deleteAndWait deletes the pods of examplesNamespace with the label
// selector and waits until they are gone (their grants released).
func deleteAndWait(ctx context.Context, cp *harness.ControlPlane, selector string) error {
	return deleteAndWaitIn(ctx, cp, examplesNamespace, selector)
}

// deleteAndWaitIn is deleteAndWait for the pods of namespace ns.
func deleteAndWaitIn(ctx context.Context, cp *harness.ControlPlane, ns, selector string) error {
	pods := cp.Client.CoreV1().Pods(ns)
	// Graceful: the pod object goes once the kubelet has stopped it (the
	// probe exits on SIGTERM).
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: selector}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
		return err == nil && len(list.Items) == 0, nil
	})
}

// restartAgentKeepsMPS deletes the agent's pod on node and waits for its
// replacement to be Ready, then checks that the MPS control daemon's pod
// and the client pod are the same pods, never restarted: the daemons are
// not the agent's children.
func restartAgentKeepsMPS(ctx context.Context, cp *harness.ControlPlane, node, client string) error {
	onNode := metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}
	before, err := cp.Client.CoreV1().Pods(systemNamespace).List(ctx, onNode)
	if err != nil {
		return err
	}
	var agent, daemon *corev1.Pod
	for i := range before.Items {
		switch p := &before.Items[i]; p.Labels["app"] {
		case "qgpu-agent", "qgpu-agent-colocation":
			agent = p
		case "qgpu-mps-control-daemon":
			daemon = p
		}
	}
	if agent == nil || daemon == nil {
		return fmt.Errorf("no agent or MPS daemon pod on %s", node)
	}
	if err := cp.Client.CoreV1().Pods(systemNamespace).Delete(ctx, agent.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Client.CoreV1().Pods(systemNamespace).List(ctx, onNode)
		if err != nil {
			return false, nil
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.Labels["app"] == agent.Labels["app"] && p.UID != agent.UID && podReady(p) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no new agent pod Ready: %w", err)
	}
	now, err := cp.Client.CoreV1().Pods(systemNamespace).Get(ctx, daemon.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the MPS control daemon pod %s: %w", daemon.Name, err)
	}
	if now.UID != daemon.UID || restarts(now) != restarts(daemon) || !podReady(now) {
		return fmt.Errorf("the MPS control daemon pod %s changed: restarts %d → %d, ready %v", daemon.Name, restarts(daemon), restarts(now), podReady(now))
	}
	c, err := cp.Client.CoreV1().Pods(examplesNamespace).Get(ctx, client, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("client %s: %w", client, err)
	}
	if c.Status.Phase != corev1.PodRunning || restarts(c) != 0 {
		return fmt.Errorf("client %s: phase %s, restarts %d", client, c.Status.Phase, restarts(c))
	}
	return nil
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// waitMPSDaemon waits (bounded) until the MPS control daemon serves every
// card of node n: its pod there is Ready, and each card of the node's
// inventory is marked ready under the node's MPS root, or whole (a card a
// whole-card pod had, which the agent asks back for its next client). The DaemonSet's
// status is no sign: read right after the node got the mps label it still
// counts the other nodes only, and the first pods reached a card whose
// daemon had not started ("ready is missing", up to six attempts).
func waitMPSDaemon(ctx context.Context, cp *harness.ControlPlane, n *node) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Client.CoreV1().Pods(systemNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app=qgpu-mps-control-daemon", FieldSelector: "spec.nodeName=" + n.name})
		if err != nil {
			return false, nil // transient; last keeps what was seen
		}
		if len(list.Items) != 1 || !podReady(&list.Items[0]) {
			last = fmt.Sprintf("%d pods of it on %s, none Ready", len(list.Items), n.name)
			return false, nil
		}
		node, err := cp.Client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		inv, err := protocol.DecodeInventory([]byte(node.Annotations[protocol.AnnotationInventory]))
		if err != nil || len(inv.Cards) == 0 {
			last = fmt.Sprintf("no inventory on %s (%v)", n.name, err)
			return false, nil
		}
		for _, c := range inv.Cards {
			card := filepath.Join(n.dir, "run-qgpu", "mps", c.UUID)
			if !exists(filepath.Join(card, enforce.MPSReadyFile)) && !exists(filepath.Join(card, enforce.MPSWholeFile)) {
				last = "card " + c.UUID + " is neither marked ready nor handed out whole"
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the MPS control daemon on %s: %s: %w", n.name, last, err)
	}
	return nil
}

func labelNode(ctx context.Context, cp *harness.ControlPlane, node string, labels map[string]string) error {
	var parts []string
	for k, v := range labels {
		parts = append(parts, fmt.Sprintf("%q:%q", k, v))
	}
	patch := `{"metadata":{"labels":{` + strings.Join(parts, ",") + `}}}`
	_, err := cp.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// optedOutNamespace creates namespace ns labelled qgpu.io/admission=ignore
// (or labels it, if it exists), as a cluster administrator opts a namespace
// out of qGPU's pod policies, and waits for its default ServiceAccount (the
// ServiceAccount admission plugin refuses pods until the controller made it).
func optedOutNamespace(ctx context.Context, cp *harness.ControlPlane, ns string) error {
	const label = "qgpu.io/admission"
	nss := cp.Client.CoreV1().Namespaces()
	_, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{label: "ignore"}}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		patch := []byte(`{"metadata":{"labels":{"` + label + `":"ignore"}}}`)
		_, err = nss.Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		return fmt.Errorf("namespace %s labelled %s=ignore: %w", ns, label, err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s has no default ServiceAccount after a minute: %w", ns, err)
	}
	return nil
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }
