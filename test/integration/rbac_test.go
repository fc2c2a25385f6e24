package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/yaml"

	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// profile is the part of a KubeSchedulerConfiguration that decides which
// API rights the scheduler needs beyond system:kube-scheduler.
type profile struct {
	LeaderElection struct {
		ResourceName      string `json:"resourceName"`
		ResourceNamespace string `json:"resourceNamespace"`
	} `json:"leaderElection"`
	Profiles []struct {
		Plugins map[string]struct {
			Enabled []struct {
				Name string `json:"name"`
			} `json:"enabled"`
		} `json:"plugins"`
	} `json:"profiles"`
}

// TestSchedulerRBACMatchesProfiles derives the rules the shipped profiles
// (config/*.yaml) need on top of system:kube-scheduler from the plugins
// they enable, and compares them with the qgpu-scheduler ClusterRole:
// a rule that no profile uses fails, and so does a missing one. It also
// checks that every profile keeps its lease where the Role grants it.
func TestSchedulerRBACMatchesProfiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "config", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no profiles in config/: %v", err)
	}
	want := sets.New[string]()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var p profile
		if err := yaml.Unmarshal(b, &p); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// The profile that replaces the stock scheduler takes its lease,
		// which system:kube-scheduler grants; every other one qGPU's own.
		lease := "qgpu-system/qgpu-scheduler"
		if filepath.Base(f) == "qgpu-scheduler-as-default.yaml" {
			lease = "kube-system/kube-scheduler"
		}
		if le := p.LeaderElection; le.ResourceNamespace+"/"+le.ResourceName != lease {
			t.Errorf("%s: lease %s/%s, want %s (manifests/scheduler/rbac.yaml grants qgpu-system/qgpu-scheduler, system:kube-scheduler kube-scheduler)",
				filepath.Base(f), le.ResourceNamespace, le.ResourceName, lease)
		}
		for _, prof := range p.Profiles {
			enabled := func(point, name string) bool {
				return slices.ContainsFunc(prof.Plugins[point].Enabled, func(e struct {
					Name string `json:"name"`
				}) bool {
					return e.Name == name
				})
			}
			anywhere := func(name string) bool {
				for point := range prof.Plugins {
					if enabled(point, name) {
						return true
					}
				}
				return false
			}
			// QGPU at the bind point writes the assignment on the Binding;
			// otherwise PreBind gets and updates the pod (plugins/qgpu/prebind.go).
			if anywhere("QGPU") && !enabled("bind", "QGPU") {
				want.Insert("/pods:get", "/pods:update")
			}
			if anywhere("Coscheduling") {
				want.Insert("scheduling.x-k8s.io/podgroups:list", "scheduling.x-k8s.io/podgroups:watch")
			}
			if anywhere("CapacityScheduling") {
				want.Insert("scheduling.x-k8s.io/elasticquotas:list", "scheduling.x-k8s.io/elasticquotas:watch")
			}
		}
	}
	objs, err := harness.ReadManifests("manifests/scheduler/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := sets.New[string]()
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" || o.GetName() != "qgpu-scheduler" {
			continue
		}
		var role rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
			t.Fatal(err)
		}
		for _, r := range role.Rules {
			if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
				t.Errorf("unexpected rule %+v", r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						got.Insert(g + "/" + res + ":" + v)
					}
				}
			}
		}
	}
	if extra := got.Difference(want); extra.Len() > 0 {
		t.Errorf("the qgpu-scheduler ClusterRole grants %v, which no shipped profile uses", sets.List(extra))
	}
	if missing := want.Difference(got); missing.Len() > 0 {
		t.Errorf("the shipped profiles need %v, which the qgpu-scheduler ClusterRole lacks", sets.List(missing))
	}
}

type access struct {
	verb, group, resource, subresource, namespace, name string
}

// checkShippedRBAC asks the API server (SubjectAccessReview) what the
// components' ServiceAccounts may do with exactly the applied manifests.
func checkShippedRBAC(t *testing.T, cp *harness.ControlPlane) {
	sched := "system:serviceaccount:qgpu-system:qgpu-scheduler"
	agent := "system:serviceaccount:qgpu-system:qgpu-agent"
	cases := []struct {
		user  string
		a     access
		allow bool
	}{
		{sched, access{"create", "", "pods", "binding", "default", ""}, true},
		{sched, access{"list", "scheduling.x-k8s.io", "podgroups", "", "", ""}, true},
		{sched, access{"get", "coordination.k8s.io", "leases", "", "qgpu-system", "qgpu-scheduler"}, true},
		{sched, access{"update", "coordination.k8s.io", "leases", "", "qgpu-system", "qgpu-scheduler"}, true},
		{sched, access{"update", "", "pods", "", "default", ""}, false},
		{sched, access{"patch", "", "pods", "", "default", ""}, false},
		{sched, access{"list", "scheduling.x-k8s.io", "elasticquotas", "", "", ""}, false},
		{sched, access{"get", "coordination.k8s.io", "leases", "", "kube-system", "qgpu-scheduler"}, false},
		{sched, access{"patch", "", "nodes", "", "", ""}, false},
		{sched, access{"watch", "", "configmaps", "", "qgpu-system", "qgpu-quota"}, true},
		{sched, access{"get", "", "configmaps", "", "qgpu-system", "qgpu-quota"}, true},
		{sched, access{"update", "", "configmaps", "", "qgpu-system", "qgpu-quota"}, false},
		{sched, access{"get", "", "configmaps", "", "team-a", "qgpu-quota"}, false},
		{sched, access{"list", "", "configmaps", "", "qgpu-system", ""}, false},
		{agent, access{"patch", "", "nodes", "", "", "n1"}, true},
		{agent, access{"patch", "", "pods", "", "default", "p"}, true},
		{agent, access{"watch", "", "pods", "", "", ""}, true},
		{agent, access{"create", "", "events", "", "default", ""}, true},
		{agent, access{"get", "", "pods", "", "default", "p"}, false},
		{agent, access{"update", "", "nodes", "", "", "n1"}, false},
		{agent, access{"patch", "", "nodes", "status", "", "n1"}, false},
		{agent, access{"patch", "", "pods", "status", "default", "p"}, true},
		{agent, access{"update", "", "pods", "status", "default", "p"}, false},
		{agent, access{"delete", "", "pods", "", "default", "p"}, false},
		{agent, access{"create", "", "pods", "binding", "default", "p"}, false},
		{agent, access{"get", "", "secrets", "", "default", ""}, false},
	}
	for _, c := range cases {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   c.user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:qgpu-system", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: c.a.verb, Group: c.a.group, Resource: c.a.resource,
				Subresource: c.a.subresource, Namespace: c.a.namespace, Name: c.a.name},
		}}
		got, err := cp.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != c.allow {
			t.Errorf("%s %+v: allowed %v, want %v (%s)", c.user, c.a, got.Status.Allowed, c.allow, got.Status.Reason)
		}
	}
}

// TestSpreadProfileUnderShippedRBAC runs the scheduler with
// config/qgpu-scheduler-spread.yaml as it is (the harness no longer moves
// its lease) and the agents with exactly the manifests' RBAC: the scheduler
// must win its lease in qgpu-system and bind a qGPU pod with only its
// shipped rules, and nobody may be refused anything. (The default profile
// is TestE2EExamples'; the gang profile needs the PodGroup CRD.)
func TestSpreadProfileUnderShippedRBAC(t *testing.T) {
	nodes, err := harness.ParseNodes("t4-0:2xT4")
	if err != nil {
		t.Fatal(err)
	}
	c := harness.StartTestCluster(t, harness.ClusterOptions{Nodes: nodes, RBAC: true, Profile: "config/qgpu-scheduler-spread.yaml"})
	createPods(t, c.Client, builders.GPUPod("spread-1").General("c", 2, 10).Obj(), builders.GPUPod("spread-2").General("c", 2, 10).Obj())
	_, a1 := waitBound(t, c.Client, "default", "spread-1")
	_, a2 := waitBound(t, c.Client, "default", "spread-2")
	waitGrant(t, c.Client, "default", "spread-1")
	if a1.Containers[0].Slices[0].Index == a2.Containers[0].Slices[0].Index {
		t.Errorf("the spread profile put both pods on card %d", a1.Containers[0].Slices[0].Index)
	}
	assertNoForbidden(t, c)
}
