package integration

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestDeployment applies manifests/ as a user does, then the colocation
// overlay, then manifests/ again, to a real API server with RBAC, and
// checks what the cluster then holds: the agent DaemonSets, the scheduler's
// disruption budget and spread, and the admission policies at work.
func TestDeployment(t *testing.T) {
	cp := harness.StartWith(t, harness.ControlPlaneOptions{RBAC: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	apply := func(path string) {
		t.Helper()
		objs, err := harness.ReadManifests(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := harness.Apply(ctx, cp.Config, objs, false); err != nil {
			t.Fatalf("applying %s: %v", path, err)
		}
	}
	mixed := makeNode("mixed", map[string]string{protocol.LabelDeviceEnable: protocol.LabelValueEnable, protocol.LabelMixedEnable: protocol.LabelValueEnable})
	plain := makeNode("plain", map[string]string{protocol.LabelDeviceEnable: protocol.LabelValueEnable})
	cpuOnly := makeNode("cpu", nil)

	apply("manifests")
	// Without the overlay, mixed nodes run no agent: the base one lacks
	// what the priority controller needs (manifests/README.md).
	checkAgents(t, cp.Client, "manifests/", map[*corev1.Node][]string{plain: {"qgpu-agent"}, mixed: nil, cpuOnly: nil})
	want := map[*corev1.Node][]string{plain: {"qgpu-agent"}, mixed: {"qgpu-agent-colocation"}, cpuOnly: nil}
	apply("manifests/overlays/colocation")
	checkAgents(t, cp.Client, "manifests/ then the colocation overlay", want)
	apply("manifests")
	checkAgents(t, cp.Client, "manifests/, the overlay, manifests/ again", want)

	t.Run("scheduler disruption budget and spread", func(t *testing.T) { checkSchedulerSpread(t, cp.Client) })
	t.Run("protect-annotations covers pods/status", func(t *testing.T) { checkStatusProtected(t, cp) })
	t.Run("agent writes only its own node", func(t *testing.T) { checkAgentOwnNode(t, cp) })
	t.Run("shipped RBAC", func(t *testing.T) { checkShippedRBAC(t, cp) })
}

func makeNode(name string, lbls map[string]string) *corev1.Node {
	lbls = labels.Merge(lbls, map[string]string{corev1.LabelHostname: name})
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
}

// checkAgents evaluates every DaemonSet's nodeSelector and required node
// affinity in qgpu-system against each node, as the DaemonSet controller
// does, and compares the names of the DaemonSets that select it.
func checkAgents(t *testing.T, cs kubernetes.Interface, after string, want map[*corev1.Node][]string) {
	t.Helper()
	dss, err := cs.AppsV1().DaemonSets("qgpu-system").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for node, names := range want {
		var got []string
		for _, ds := range dss.Items {
			pod := &corev1.Pod{Spec: ds.Spec.Template.Spec}
			ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
			if err != nil {
				t.Fatalf("DaemonSet %s: %v", ds.Name, err)
			}
			if ok {
				got = append(got, ds.Name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, names) {
			t.Errorf("after %s: node %s (labels %v) is selected by DaemonSets %q, want %q", after, node.Name, node.Labels, got, names)
		}
	}
}

// checkSchedulerSpread: the two replicas have a PodDisruptionBudget of
// minAvailable 1 and prefer different nodes.
func checkSchedulerSpread(t *testing.T, cs kubernetes.Interface) {
	ctx := context.Background()
	d, err := cs.AppsV1().Deployments("qgpu-system").Get(ctx, "qgpu-scheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	pdb, err := cs.PolicyV1().PodDisruptionBudgets("qgpu-system").Get(ctx, "qgpu-scheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the scheduler's PodDisruptionBudget: %v", err)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget minAvailable %v, want 1", pdb.Spec.MinAvailable)
	}
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(podLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not select the scheduler's pods %v (%v)", pdb.Spec.Selector, podLabels, err)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	aff := d.Spec.Template.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("the scheduler has no preferred pod anti-affinity: %+v", aff)
	}
	if req := aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution; len(req) != 0 {
		t.Errorf("required anti-affinity %+v: a one-node cluster could not run both replicas", req)
	}
	term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
	if term.TopologyKey != corev1.LabelHostname || err != nil || !sel.Matches(podLabels) {
		t.Errorf("anti-affinity term %+v: want topologyKey %s and a selector of the scheduler's own pods", term, corev1.LabelHostname)
	}
}

// checkStatusProtected: a cluster admin cannot change the assignment or
// add a grant through pods/status (which writes metadata too), while a
// status update that leaves them alone passes.
func checkStatusProtected(t *testing.T, cp *harness.ControlPlane) {
	ctx := context.Background()
	cs := cp.Client
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "status-target", Namespace: "default"},
		Spec: corev1.PodSpec{SchedulerName: "nobody", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	pod, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Only the scheduler writes an assignment: bind the pod with one as the
	// scheduler does (an admin impersonating its ServiceAccount).
	asScheduler := impersonate(t, cp, "system:serviceaccount:qgpu-system:qgpu-scheduler")
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID,
		Annotations: map[string]string{protocol.AnnotationAssignment: forgedAssignment(string(pod.UID))}},
		Target: corev1.ObjectReference{Kind: "Node", Name: "plain"}}
	if err := asScheduler.CoreV1().Pods("default").Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding with the assignment as the scheduler: %v", err)
	}
	// Until the apiserver has loaded the policy, write a new grant each try.
	attempt := 0
	waitPolicy(t, "changing the grant through pods/status", "is written by the qgpu-agent only", func(ctx context.Context) error {
		cur, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		attempt++
		cur.Annotations[protocol.AnnotationGrant] = strconv.Itoa(attempt)
		_, err = cs.CoreV1().Pods("default").UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	edits := map[string]func(p *corev1.Pod){
		"change assignment": func(p *corev1.Pod) { p.Annotations[protocol.AnnotationAssignment] = forgedAssignment("other") },
		"drop assignment":   func(p *corev1.Pod) { delete(p.Annotations, protocol.AnnotationAssignment) },
		"add grant":         func(p *corev1.Pod) { p.Annotations[protocol.AnnotationGrant] = forgedAssignment(string(pod.UID)) },
	}
	for what, edit := range edits {
		cur, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		edit(cur)
		_, err = cs.CoreV1().Pods("default").UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil || !strings.Contains(err.Error(), "is written by the qgpu-") {
			t.Errorf("%s through pods/status as cluster admin: %v, want a denial by qgpu-protect-annotations", what, err)
		}
	}
	cur, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.Conditions = append(cur.Status.Conditions, corev1.PodCondition{Type: "example.com/checked", Status: corev1.ConditionTrue})
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Errorf("a status update that leaves the annotations alone: %v", err)
	}
}

// waitPolicy retries f until it returns an error containing msg: an
// admission policy takes effect when the apiserver's informer has it.
func waitPolicy(t *testing.T, what, msg string, f func(ctx context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		last = f(ctx)
		return last != nil && strings.Contains(last.Error(), msg), nil
	})
	if err != nil {
		t.Fatalf("%s: %v, want an error containing %q", what, last, msg)
	}
}

// impersonate returns a client of the admin impersonating user.
func impersonate(t *testing.T, cp *harness.ControlPlane, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
