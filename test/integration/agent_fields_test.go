package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/qgpu-scheduler/qgpu/agent/allocate"
	"github.com/qgpu-scheduler/qgpu/agent/cardhealth"
	"github.com/qgpu-scheduler/qgpu/agent/inventory"
	"github.com/qgpu-scheduler/qgpu/agent/uninstall"
	"github.com/qgpu-scheduler/qgpu/agent/xgn"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// agentOn returns a client with a token of the agent's ServiceAccount bound
// to a pod on node, as the kubelet projects into the DaemonSet's pod.
func agentOn(t *testing.T, cp *harness.ControlPlane, node string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	p := podOn("qgpu-system", "qgpu-agent-"+node, node)
	p.Spec.ServiceAccountName = "qgpu-agent"
	p, err := cp.Client.CoreV1().Pods("qgpu-system").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cp.ServiceAccountToken(ctx, "qgpu-system", "qgpu-agent", &authenticationv1.BoundObjectReference{
		Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID})
	if err != nil {
		t.Fatal(err)
	}
	return clientForToken(t, cp, tok)
}

// adminTaint is a taint the administrator set on the agent's node: the
// agent keeps it through its own taint writes.
var adminTaint = corev1.Taint{Key: "example.com/dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}

// TestAgentWritesOnlyItsFields: with a stolen token of node-a's agent one
// may write only what the agent writes, on node-a and its pods
// (qgpu-agent-own-node compares object with oldObject, as NodeRestriction
// does for kubelets). The agent's own code passes: the inventory, the xgn
// taint, the grant, the suspension annotation (its patch written out here),
// and uninstall removing the first two. Every other change is refused with a message naming the field:
// Node labels (node-restriction.kubernetes.io/ among them), other
// annotations, other taints, cordoning; pod labels, images, tolerations,
// deadlines, finalizers; and creating or deleting pods on its node (by
// RBAC, and by the policy where a wider role let it through).
func TestAgentWritesOnlyItsFields(t *testing.T) {
	cp := harness.StartWith(t, harness.ControlPlaneOptions{RBAC: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	objs, err := harness.ReadManifests("manifests")
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Apply(ctx, cp.Config, objs, false); err != nil {
		t.Fatalf("applying manifests/: %v", err)
	}
	cs := cp.Client
	nodeA := makeNode("node-a", map[string]string{xgn.LabelAllocMode: xgn.ModeXGN})
	nodeA.Spec.Taints = []corev1.Taint{adminTaint}
	createNodes(t, cs, nodeA, makeNode("node-b", nil))
	createPods(t, cs, podOn("default", "work-a", "node-a"))
	asA := agentOn(t, cp, "node-a")
	inv := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, protocol.AnnotationInventory, builders.Inventory(builders.Cards(1, "A100", 81920))))
	waitPolicy(t, "node-a's agent patching node-b", "may not write Node node-b", func(ctx context.Context) error {
		_, err := asA.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, inv, metav1.PatchOptions{})
		return err
	})
	t.Run("the agent's own writes pass", func(t *testing.T) { checkAgentOwnWrites(t, cs, asA) })
	t.Run("anything else is refused, naming the field", func(t *testing.T) { checkAgentOtherWrites(t, cs, asA) })
	t.Run("no creating, no deleting but its own pods, whatever RBAC grants", func(t *testing.T) { checkAgentNoCreateDelete(t, cp) })
}

// checkAgentNoCreateDelete: RBAC grants the agent neither, so the policy's
// own refusal shows only with a wider grant: the agent of node-a as an
// administrator impersonates it, in system:masters, with its token's node
// name, creating a pod on node-a, deleting its Node or a pod of another
// node; deleting a pod of its own node is allowed (mpsguard's evict).
func checkAgentNoCreateDelete(t *testing.T, cp *harness.ControlPlane) {
	ctx := context.Background()
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:qgpu-system:qgpu-agent",
		Groups: []string{"system:masters"}, Extra: map[string][]string{nodeNameExtra: {"node-a"}}}
	wide, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = wide.CoreV1().Pods("default").Create(ctx, podOn("default", "planted-wide", "node-a"), metav1.CreateOptions{})
	if !contains(err, "may not create pods") {
		t.Errorf("creating a pod on node-a: %v, want a refusal by qgpu-agent-own-node", err)
	}
	// It may delete a pod bound to its node (the MPS guard's eviction), no
	// other pod and no Node.
	if _, err := cp.Client.CoreV1().Pods("default").Create(ctx, podOn("default", "victim-a", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wide.CoreV1().Pods("default").Delete(ctx, "victim-a", metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting a pod bound to node-a: %v, want it allowed (mpsguard's evict policy)", err)
	}
	if _, err := cp.Client.CoreV1().Pods("default").Create(ctx, podOn("default", "victim-b", "node-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wide.CoreV1().Pods("default").Delete(ctx, "victim-b", metav1.DeleteOptions{})
	if !contains(err, "may write only pods bound to it") {
		t.Errorf("deleting a pod on node-b: %v, want a refusal by qgpu-agent-own-node", err)
	}
	err = wide.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{})
	if !contains(err, "may not delete nodes") {
		t.Errorf("deleting its Node: %v, want a refusal by qgpu-agent-own-node", err)
	}
}

// checkAgentOwnWrites runs the agent's code that writes Nodes and pods, as
// node-a's agent, and checks what it wrote.
func checkAgentOwnWrites(t *testing.T, admin, asA kubernetes.Interface) {
	ctx := context.Background()
	inv := &protocol.Inventory{Version: protocol.InventoryVersion, Cards: builders.Cards(2, "A100", 81920)}
	if err := inventory.Publish(ctx, asA, "node-a", inv); err != nil {
		t.Errorf("inventory.Publish: %v", err)
	}
	node, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := xgn.Reconcile(ctx, asA, node); err != nil {
		t.Errorf("xgn.Reconcile: %v", err)
	}
	pod, err := admin.CoreV1().Pods("default").Get(ctx, "work-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	grant := &protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(pod.UID), Node: "node-a", Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{{Index: 0, UUID: inv.Cards[0].UUID, MemoryGiB: 4, Cores: 30}}}}}
	if err := allocate.PatchGrant(ctx, asA, pod, grant); err != nil {
		t.Errorf("allocate.PatchGrant: %v", err)
	}
	// agent/suspension's patch (patchSuspended), written out: that package
	// links go-nvml through agent/priority, which this test binary cannot.
	suspended, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID,
		"annotations": map[string]any{protocol.AnnotationSuspended: protocol.Suspension{Since: time.Now().UTC().Truncate(time.Millisecond)}.Encode()}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := asA.CoreV1().Pods("default").Patch(ctx, pod.Name, types.MergePatchType, suspended, metav1.PatchOptions{FieldManager: "qgpu-agent"}); err != nil {
		t.Errorf("the suspension writer's patch: %v", err)
	}
	// agent/cardhealth's condition on the pod's status.
	cond, err := cardhealth.ConditionPatch(pod.UID, corev1.PodCondition{Type: cardhealth.ConditionType, Status: corev1.ConditionFalse,
		Reason: cardhealth.ReasonUnhealthy, Message: "unhealthy: card 0", LastTransitionTime: metav1.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := asA.CoreV1().Pods("default").Patch(ctx, pod.Name, types.StrategicMergePatchType, cond, metav1.PatchOptions{FieldManager: "qgpu-agent"}, "status"); err != nil {
		t.Errorf("the card-health condition's patch: %v", err)
	}
	pod, err = admin.CoreV1().Pods("default").Get(ctx, "work-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == cardhealth.ConditionType }) {
		t.Errorf("pod work-a has no condition %s after the agent wrote it: %v", cardhealth.ConditionType, pod.Status.Conditions)
	}
	for _, k := range []string{protocol.AnnotationGrant, protocol.AnnotationSuspended} {
		if _, ok := pod.Annotations[k]; !ok {
			t.Errorf("pod work-a has no %s after the agent wrote it: %v", k, pod.Annotations)
		}
	}
	node, err = admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Annotations[protocol.AnnotationInventory]; !ok || len(node.Spec.Taints) != 2 {
		t.Errorf("node-a after the inventory and the xgn taint: annotations %v, taints %v", node.Annotations, node.Spec.Taints)
	}
	changes, err := uninstall.Run(ctx, uninstall.Config{Node: "node-a", Client: asA, Force: true})
	if err != nil {
		t.Errorf("uninstall.Run: %v", err)
	}
	if len(changes) != 2 {
		t.Errorf("uninstall removed %q, want the inventory and the xgn taint", changes)
	}
	node, err = admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Spec.Taints) != 1 || node.Spec.Taints[0] != adminTaint {
		t.Errorf("node-a's taints after uninstall: %v, want only %v", node.Spec.Taints, adminTaint)
	}
}

// checkAgentOtherWrites: node-a's agent changing anything else on node-a
// or its pods is refused by qgpu-agent-own-node, naming the field.
func checkAgentOtherWrites(t *testing.T, admin, asA kubernetes.Interface) {
	ctx := context.Background()
	taints := func(ts ...corev1.Taint) []byte {
		b, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": ts}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Tolerations may only be added: keep those the pod has (defaulted ones).
	pod, err := admin.CoreV1().Pods("default").Get(ctx, "work-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tolerate, err := json.Marshal(map[string]any{"spec": map[string]any{
		"tolerations": append(pod.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})}})
	if err != nil {
		t.Fatal(err)
	}
	xgnNoExecute := corev1.Taint{Key: xgn.TaintKey, Value: "true", Effect: corev1.TaintEffectNoExecute}
	evict := corev1.Taint{Key: "example.com/evict", Effect: corev1.TaintEffectNoExecute}
	cases := []struct {
		name  string
		pod   bool // else node-a
		typ   types.PatchType
		patch []byte
		field string
	}{
		{"a node-restriction label on its Node", false, types.MergePatchType, []byte(`{"metadata":{"labels":{"node-restriction.kubernetes.io/gpu":"true"}}}`), "metadata.labels[node-restriction.kubernetes.io/gpu]"},
		{"another label on its Node", false, types.MergePatchType, []byte(`{"metadata":{"labels":{"` + xgn.LabelAllocMode + `":null}}}`), "metadata.labels[" + xgn.LabelAllocMode + "]"},
		{"another annotation on its Node", false, types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/touched":"yes"}}}`), "metadata.annotations[example.com/touched]"},
		{"another taint", false, types.MergePatchType, taints(adminTaint, evict), "spec.taints"},
		{"dropping the administrator's taint", false, types.MergePatchType, taints(), "spec.taints"},
		{"the xgn taint evicting", false, types.MergePatchType, taints(adminTaint, xgnNoExecute), "spec.taints[" + xgn.TaintKey + "]"},
		{"cordoning its Node", false, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), "spec.unschedulable"},
		{"a label on a pod of its node", true, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"frontend"}}}`), "metadata.labels[app]"},
		{"another annotation on a pod", true, types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/touched":"yes"}}}`), "metadata.annotations[example.com/touched]"},
		{"a pod's finalizers", true, types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`), "metadata.finalizers"},
		{"a pod's image", true, types.StrategicMergePatchType, []byte(`{"spec":{"containers":[{"name":"c","image":"registry.example/miner:1"}]}}`), "spec.containers[c]"},
		{"a pod's tolerations", true, types.MergePatchType, tolerate, "spec.tolerations"},
		{"a pod's deadline", true, types.MergePatchType, []byte(`{"spec":{"activeDeadlineSeconds":1}}`), "spec.activeDeadlineSeconds"},
	}
	for _, c := range []struct{ name, patch, field string }{
		{"another condition of a pod", `{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`, "status.conditions"},
		{"a pod's phase", `{"status":{"phase":"Failed"}}`, "status.phase"},
		{"a pod's message", `{"status":{"message":"evicted"}}`, "status.message"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := asA.CoreV1().Pods("default").Patch(ctx, "work-a", types.StrategicMergePatchType, []byte(c.patch), metav1.PatchOptions{}, "status")
			if want := "may not change " + c.field; !contains(err, want) {
				t.Errorf("%v, want a refusal by qgpu-agent-own-node containing %q", err, want)
			}
		})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.pod {
				_, err = asA.CoreV1().Pods("default").Patch(ctx, "work-a", c.typ, c.patch, metav1.PatchOptions{})
			} else {
				_, err = asA.CoreV1().Nodes().Patch(ctx, "node-a", c.typ, c.patch, metav1.PatchOptions{})
			}
			if want := "may not change " + c.field; !contains(err, want) {
				t.Errorf("%v, want a refusal by qgpu-agent-own-node containing %q", err, want)
			}
		})
	}
	t.Run("creating a pod on its node", func(t *testing.T) {
		p := podOn("default", "planted", "node-a")
		p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = asA.CoreV1().Pods("default").Patch(ctx, p.Name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "qgpu-agent"})
		if err == nil {
			t.Errorf("node-a's agent created pod default/planted by server-side apply")
		}
		if _, err := admin.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("pod default/planted: %v, want not found", err)
		}
	})
}
