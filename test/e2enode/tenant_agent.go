package main

import (
	"encoding/json"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The tenant suite's attempts with the agent's token (tenant.go).

// agentToken: the agent's ServiceAccount token of own's agent pod (bound
// to that pod, so it names own's node) writes what the agent never does:
// a label on another Node, a node-restriction label and a taint on its
// own Node, the image of a pod on its node, a label of a pod on another
// node. Each must be refused by qgpu-agent-own-node; control: the same
// write by the administrator succeeds (then is undone), so the write is
// valid and RBAC is not what refused it.
func (t *tenantSuite) agentToken(own, other *node) {
	agent, err := t.agentClient(own)
	if err != nil {
		t.fail("the agent's token on %s: %v", own.name, err)
		t.notAttempted("agent token", err.Error())
		return
	}
	// Pods to write: one on the agent's node, one on the other node.
	mine := t.pod(tenantNamespace, "tenant-agent-target", own)
	theirs := t.pod(tenantNamespace, "tenant-agent-foreign", other)
	for _, p := range []*corev1.Pod{mine, theirs} {
		t.res.containers++
		if _, err := t.tenant.CoreV1().Pods(tenantNamespace).Create(t.ctx, p, metav1.CreateOptions{}); err != nil {
			t.fail("agent token: creating %s: %v", p.Name, err)
			return
		}
		if _, err := waitPodSettledIn(t.ctx, t.cp, tenantNamespace, p.Name); err != nil {
			t.fail("agent token: %s: %v", p.Name, err)
			return
		}
	}
	type write struct {
		key, kind, name, patch, undo, want string
	}
	image := t.o.repo + "/pause:" + t.o.version
	writes := []write{
		{"agent token: a label on another Node", "node", other.name,
			`{"metadata":{"labels":{"e2e.qgpu.io/forged":"true"}}}`, `{"metadata":{"labels":{"e2e.qgpu.io/forged":null}}}`,
			"may not write Node " + other.name},
		{"agent token: a node-restriction label on its own Node", "node", own.name,
			`{"metadata":{"labels":{"node-restriction.kubernetes.io/e2e-forged":"true"}}}`,
			`{"metadata":{"labels":{"node-restriction.kubernetes.io/e2e-forged":null}}}`, "may not change metadata.labels"},
		{"agent token: a taint other than xgn on its own Node", "node-taint", own.name, "", "", "may not change spec.taints"},
		{"agent token: the image of a pod on its node", "pod", mine.Name,
			`{"spec":{"containers":[{"name":"probe","image":"` + image + `"}]}}`, "", "may not change spec.containers"},
		{"agent token: a label of a pod on another node", "pod", theirs.Name,
			`{"metadata":{"labels":{"e2e.qgpu.io/forged":"true"}}}`, `{"metadata":{"labels":{"e2e.qgpu.io/forged":null}}}`,
			"may write only pods bound to it"},
	}
	patch := func(c kubernetes.Interface, w write, body string) error {
		switch w.kind {
		case "node":
			_, err := c.CoreV1().Nodes().Patch(t.ctx, w.name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
			return err
		case "pod":
			_, err := c.CoreV1().Pods(tenantNamespace).Patch(t.ctx, w.name, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{})
			return err
		}
		return fmt.Errorf("unknown kind %s", w.kind)
	}
	for _, w := range writes {
		if w.kind == "node-taint" {
			t.taintWrite(agent, w.key, w.name, w.want)
			continue
		}
		switch err := patch(agent, w, w.patch); {
		case err != nil && strings.Contains(err.Error(), "qgpu-agent-own-node") && strings.Contains(err.Error(), w.want):
			t.refused(w.key, "qgpu-agent-own-node ("+w.want+")")
		case err != nil:
			t.notAttempted(w.key, "refused, but not as qgpu-agent-own-node refuses it: "+err.Error())
		default:
			t.escaped(w.key, "the apiserver accepted the agent's write")
		}
		err := patch(t.cp.Client, w, w.patch)
		t.control(w.key, err == nil, fmt.Sprintf("(the same write by the administrator): error %v", err))
		if err == nil && w.undo != "" {
			if err := patch(t.cp.Client, w, w.undo); err != nil {
				t.fail("%s: undoing the control's write: %v", w.key, err)
			}
		}
	}
}

// taintWrite: the agent's token adds a taint other than its xgn taint to
// its own Node; control: the administrator adds the same taint (and
// removes it).
func (t *tenantSuite) taintWrite(agent kubernetes.Interface, key, node, want string) {
	taint := corev1.Taint{Key: "e2e.qgpu.io/forged", Value: "true", Effect: corev1.TaintEffectPreferNoSchedule}
	// The agent's role may patch Nodes, not update them: a merge patch of
	// the whole taint list.
	setTaints := func(c kubernetes.Interface, keepForged bool) error {
		n, err := t.cp.Client.CoreV1().Nodes().Get(t.ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var taints []corev1.Taint
		for _, tt := range n.Spec.Taints {
			if tt.Key != taint.Key {
				taints = append(taints, tt)
			}
		}
		if keepForged {
			taints = append(taints, taint)
		}
		body, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": taints}})
		if err != nil {
			return err
		}
		_, err = c.CoreV1().Nodes().Patch(t.ctx, node, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	}
	add := func(c kubernetes.Interface) error { return setTaints(c, true) }
	switch err := add(agent); {
	case err != nil && strings.Contains(err.Error(), "qgpu-agent-own-node") && strings.Contains(err.Error(), want):
		t.refused(key, "qgpu-agent-own-node ("+want+")")
	case err != nil:
		t.notAttempted(key, "refused, but not as qgpu-agent-own-node refuses it: "+err.Error())
	default:
		t.escaped(key, "the apiserver accepted the agent's write")
	}
	err := add(t.cp.Client)
	t.control(key, err == nil, fmt.Sprintf("(the same write by the administrator): error %v", err))
	if err != nil {
		return
	}
	err = setTaints(t.cp.Client, false)
	if err != nil {
		t.fail("%s: removing the control's taint: %v", key, err)
	}
}

// agentClient is a client with a token of the agent's ServiceAccount
// bound to the agent's pod on n, as the kubelet projects it (so it names
// n as authentication.kubernetes.io/node-name).
func (t *tenantSuite) agentClient(n *node) (kubernetes.Interface, error) {
	pods, err := t.cp.Client.CoreV1().Pods(systemNamespace).List(t.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.name})
	if err != nil {
		return nil, err
	}
	var agent *corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; strings.HasPrefix(p.Labels["app"], "qgpu-agent") && p.Spec.ServiceAccountName == "qgpu-agent" && p.DeletionTimestamp == nil {
			agent = p
		}
	}
	if agent == nil {
		return nil, fmt.Errorf("no agent pod with ServiceAccount qgpu-agent on %s", n.name)
	}
	expiry := int64(600)
	tr, err := t.cp.Client.CoreV1().ServiceAccounts(systemNamespace).CreateToken(t.ctx, "qgpu-agent", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: agent.Name, UID: agent.UID}}},
		metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	cfg := rest.AnonymousClientConfig(t.cp.Config)
	cfg.BearerToken = tr.Status.Token
	return kubernetes.NewForConfig(cfg)
}
