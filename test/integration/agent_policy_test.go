package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

const nodeNameExtra = "authentication.kubernetes.io/node-name"

// checkAgentOwnNode runs on a control plane with RBAC and manifests/
// applied: a token of the agent's ServiceAccount bound to a pod on node-a
// (what the kubelet projects into the agent's pod) may patch node-a and the
// pods bound to it, and is refused on node-b and its pods by the
// qgpu-agent-own-node policy; a token that names no node is refused
// everywhere (fail closed).
func checkAgentOwnNode(t *testing.T, cp *harness.ControlPlane) {
	ctx := context.Background()
	cs := cp.Client
	for _, n := range []string{"node-a", "node-b"} {
		createNodes(t, cs, makeNode(n, nil))
	}
	agentPod := podOn("qgpu-system", "qgpu-agent-a", "node-a")
	agentPod.Spec.ServiceAccountName = "qgpu-agent"
	agentPod, err := cs.CoreV1().Pods("qgpu-system").Create(ctx, agentPod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{podOn("default", "work-a", "node-a"), podOn("default", "work-b", "node-b")} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := cp.ServiceAccountToken(ctx, "qgpu-system", "qgpu-agent", &authenticationv1.BoundObjectReference{
		Kind: "Pod", APIVersion: "v1", Name: agentPod.Name, UID: agentPod.UID})
	if err != nil {
		t.Fatal(err)
	}
	asA := clientForToken(t, cp, tok)
	review, err := asA.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := review.Status.UserInfo.Extra[nodeNameExtra]; !slices.Equal(got, authenticationv1.ExtraValue{"node-a"}) {
		t.Fatalf("the pod-bound token's %s is %q, want [node-a]; user %+v", nodeNameExtra, got, review.Status.UserInfo)
	}

	// The inventory: the one annotation of its Node the agent may write
	// (TestAgentWritesOnlyItsFields tries the others).
	annotate := fmt.Sprintf(`{"metadata":{"annotations":{%q:"by-agent-a"}}}`, protocol.AnnotationInventory)
	patchNode := func(c kubernetes.Interface, name string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(annotate), metav1.PatchOptions{})
			return err
		}
	}
	patchPod := func(c kubernetes.Interface, name string) error {
		grant := fmt.Sprintf(`{"metadata":{"annotations":{%q:"x"}}}`, protocol.AnnotationGrant)
		_, err := c.CoreV1().Pods("default").Patch(ctx, name, types.MergePatchType, []byte(grant), metav1.PatchOptions{})
		return err
	}
	waitPolicy(t, "node-a's agent patching node-b", "may not write Node node-b", patchNode(asA, "node-b"))
	if err := patchNode(asA, "node-a")(ctx); err != nil {
		t.Errorf("node-a's agent patching node-a: %v", err)
	}
	if err := patchPod(asA, "work-a"); err != nil {
		t.Errorf("node-a's agent patching a pod on node-a: %v", err)
	}
	if err := patchPod(asA, "work-b"); err == nil || !contains(err, "may write only pods bound to it") {
		t.Errorf("node-a's agent patching a pod on node-b: %v, want a denial by qgpu-agent-own-node", err)
	}
	if _, err := asA.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"}); err != nil {
		t.Errorf("node-a's agent listing its pods: %v", err)
	}
	checkAgentEvents(t, asA)

	unbound, err := cp.ServiceAccountToken(ctx, "qgpu-system", "qgpu-agent", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := patchNode(clientForToken(t, cp, unbound), "node-a")(ctx); err == nil || !contains(err, "names no node") {
		t.Errorf("a token without a node name patching node-a: %v, want a denial (fail closed)", err)
	}
}

// checkAgentEvents: the agent of node-a records events from node-a only,
// and none about another Node.
func checkAgentEvents(t *testing.T, asA kubernetes.Interface) {
	ctx := context.Background()
	event := func(name, host string, about corev1.ObjectReference) error {
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			InvolvedObject: about, Reason: "Test", Message: "test", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "qgpu-agent", Host: host}}
		_, err := asA.CoreV1().Events("default").Create(ctx, ev, metav1.CreateOptions{})
		return err
	}
	pod := corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "work-a"}
	if err := event("from-a", "node-a", pod); err != nil {
		t.Errorf("node-a's agent recording an event about its pod: %v", err)
	}
	if err := event("from-b", "node-b", pod); err == nil || !contains(err, "events of its own node only") {
		t.Errorf("node-a's agent recording an event as node-b: %v, want a denial", err)
	}
	if err := event("about-b", "node-a", corev1.ObjectReference{Kind: "Node", Name: "node-b"}); err == nil || !contains(err, "events of its own node only") {
		t.Errorf("node-a's agent recording an event about Node node-b: %v, want a denial", err)
	}
}

func podOn(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
}

func clientForToken(t *testing.T, cp *harness.ControlPlane, token string) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cp.ConfigForToken(token))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }
