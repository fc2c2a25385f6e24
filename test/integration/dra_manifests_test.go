package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/agent/dra"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestDRAComponent renders manifests/ (and the colocation overlay) with
// the manifests/overlays/dra component, as its comment tells a user to,
// checks that every agent switches to DRA mode with the kubelet's plugin
// directories, applies it to a real API server with RBAC, and writes
// ResourceSlices with a token bound to the agent's pod on node-a: its own
// node's slice of driver gpu.qgpu.io is allowed, another node's, another
// driver's and an unbound token's are refused by qgpu-agent-dra-own-node.
func TestDRAComponent(t *testing.T) {
	root := repoRoot(t)
	var objs []*unstructured.Unstructured
	for _, base := range []string{"manifests", "manifests/overlays/colocation"} {
		dir := t.TempDir()
		rel := func(p string) string { // kustomize takes no absolute path
			r, err := filepath.Rel(dir, filepath.Join(root, p))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		k := "resources:\n- " + rel(base) + "\ncomponents:\n- " + rel("manifests/overlays/dra") + "\n"
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := harness.ReadManifests(dir)
		if err != nil {
			t.Fatal(err)
		}
		agents := 0
		for _, o := range got {
			if o.GetKind() != "DaemonSet" || (o.GetName() != "qgpu-agent" && o.GetName() != "qgpu-agent-colocation") {
				continue
			}
			agents++
			var ds appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
				t.Fatal(err)
			}
			checkDRAAgent(t, base, &ds)
		}
		if want := map[string]int{"manifests": 1, "manifests/overlays/colocation": 2}[base]; agents != want {
			t.Errorf("%s with the component: %d agent DaemonSets, want %d", base, agents, want)
		}
		objs = append(objs, got...) // manifests/ first: it creates the namespace
	}

	cp := harness.StartWith(t, harness.ControlPlaneOptions{RBAC: true})
	ctx := context.Background()
	if err := harness.Apply(ctx, cp.Config, objs, false); err != nil {
		t.Fatalf("applying manifests/ and the colocation overlay with the component: %v", err)
	}
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
	tok, err := cp.ServiceAccountToken(ctx, "qgpu-system", "qgpu-agent", &authenticationv1.BoundObjectReference{
		Kind: "Pod", APIVersion: "v1", Name: agentPod.Name, UID: agentPod.UID})
	if err != nil {
		t.Fatal(err)
	}
	asA := clientForToken(t, cp, tok)
	createSlice := func(c kubernetes.Interface, name, node, driver string) func(context.Context) error {
		return func(ctx context.Context) error {
			// A generated name: a try before the policy took effect creates one.
			s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}, Spec: resourceapi.ResourceSliceSpec{
				Driver: driver, NodeName: &node, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}}}
			_, err := c.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
			return err
		}
	}
	const denied = "may write only ResourceSlices of driver gpu.qgpu.io on its own node"
	waitPolicy(t, "node-a's agent creating node-b's slice", denied, createSlice(asA, "b", "node-b", protocol.DRADriver))
	if err := createSlice(asA, "a", "node-a", protocol.DRADriver)(ctx); err != nil {
		t.Errorf("node-a's agent creating its own slice: %v", err)
	}
	if err := createSlice(asA, "a-other", "node-a", "other.example.com")(ctx); !contains(err, denied) {
		t.Errorf("node-a's agent creating another driver's slice: %v, want a denial", err)
	}
	if err := createSlice(cs, "b", "node-b", protocol.DRADriver)(ctx); err != nil {
		t.Fatal(err)
	}
	stored, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	denials := 0
	for _, s := range stored.Items {
		err := asA.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{})
		if own := *s.Spec.NodeName == "node-a" && s.Spec.Driver == protocol.DRADriver; own != (err == nil) || (!own && !contains(err, denied)) {
			t.Errorf("node-a's agent deleting slice %s of node %s, driver %s: %v", s.Name, *s.Spec.NodeName, s.Spec.Driver, err)
		}
		if err != nil {
			denials++
		}
	}
	if denials == 0 {
		t.Error("no delete was denied: node-b's slice was not among those tried")
	}
	if _, err := asA.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the agent listing claims: %v", err)
	}
	checkClaimStatusPolicy(t, cs, asA)
	unbound, err := cp.ServiceAccountToken(ctx, "qgpu-system", "qgpu-agent", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := createSlice(clientForToken(t, cp, unbound), "c", "node-a", protocol.DRADriver)(ctx); !contains(err, "names no node") {
		t.Errorf("an unbound token creating a slice: %v, want a denial", err)
	}
}

// checkDRAAgent: the agent runs in DRA mode with the kubelet's plugin
// directories at the paths the kubelet uses.
func checkDRAAgent(t *testing.T, base string, ds *appsv1.DaemonSet) {
	t.Helper()
	c := ds.Spec.Template.Spec.Containers[0]
	if c.Name != "qgpu-agent" || !slices.Contains(c.Args, "--kubelet-api=dra") {
		t.Errorf("%s: DaemonSet %s container %s args %v: want --kubelet-api=dra", base, ds.Name, c.Name, c.Args)
	}
	hostPaths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for _, want := range []string{"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry"} {
		found := false
		for _, m := range c.VolumeMounts {
			if m.MountPath == want && hostPaths[m.Name] == want {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: DaemonSet %s does not mount the host's %s at the same path", base, ds.Name, want)
		}
	}
}

// checkClaimStatusPolicy: node-a's agent may write the status.devices entry
// of its own device into a claim allocated on node-a (agent/dra's device
// status), and nothing else: not a claim allocated on node-b, not the
// claim's consumers (qgpu-agent-dra-claim-status).
func checkClaimStatusPolicy(t *testing.T, admin, asA kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	allocated := func(name, node string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: protocol.DRADeviceClass(protocol.ClassGeneral)}}}}}}
		c, err := admin.ResourceV1().ResourceClaims("default").Create(ctx, c, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: protocol.DRADriver, Pool: node, Device: "gpu-0"}}}}
		if c, err = admin.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	withEntry := func(c *resourceapi.ResourceClaim, node string) *resourceapi.ResourceClaim {
		c = c.DeepCopy()
		c.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: protocol.DRADriver, Pool: node, Device: "gpu-0",
			Conditions: []metav1.Condition{{Type: dra.DeviceCondition, Status: metav1.ConditionFalse, Reason: dra.DeviceReasonUnhealthy,
				Message: "unhealthy: card 0", LastTransitionTime: metav1.Now()}}}}
		return c
	}
	own, other := allocated("on-a", "node-a"), allocated("on-b", "node-b")
	if _, err := asA.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, withEntry(own, "node-a"), metav1.UpdateOptions{}); err != nil {
		t.Errorf("node-a's agent writing its device's status into a claim allocated on node-a: %v", err)
	}
	_, err := asA.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, withEntry(other, "node-b"), metav1.UpdateOptions{})
	if !contains(err, "may write the status only of claims allocated on its node") {
		t.Errorf("node-a's agent writing a node-b claim's status: %v, want a denial", err)
	}
	own, err = admin.ResourceV1().ResourceClaims("default").Get(ctx, "on-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "00000000-0000-0000-0000-000000000001"}}
	_, err = asA.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, own, metav1.UpdateOptions{})
	if !contains(err, "may not change status.reservedFor") {
		t.Errorf("node-a's agent reserving its node's claim: %v, want a denial", err)
	}
}
