package allocate

import (
	"errors"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

type call struct {
	resource string
	n        int64
	want     string // "pod/container", or "" for an error
	errHas   string
}

func TestMatch(t *testing.T) {
	forged := general("forged", 0, 4, 30, 0)
	a, _ := AssignmentOf(general("other", 0, 4, 30, 0), testNode)
	setAssignment(forged, a) // another pod's UID
	otherNode := general("elsewhere", 0, 4, 30, 0)
	otherNode.Spec.NodeName = "n2"
	done := general("done", 0, 4, 30, 0)
	done.Status.Phase = v1.PodSucceeded
	deleting := general("deleting", 0, 4, 30, 0)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	lying := general("lying", 0, 4, 30, 0)
	lying.Spec.Containers[0].Resources.Limits[protocol.ResourceMemory] = lying.Spec.Containers[0].Resources.Limits[protocol.ResourceCore]

	tests := []struct {
		name  string
		pods  []*v1.Pod
		known []string // pods the kubelet has taken in; nil: it was not asked
		calls []call
	}{{
		name: "general pod: memory then core",
		pods: []*v1.Pod{general("g", 0, 4, 30, 1)},
		calls: []call{
			{protocol.ResourceMemory, 4, "g/main", ""},
			{protocol.ResourceCore, 30, "g/main", ""},
			{protocol.ResourceCore, 30, "", "no pod bound to node n1"},
		},
	}, {
		name: "online pod holds memory only",
		pods: []*v1.Pod{makePod("on", 0, protocol.ClassOnline, ctr{"srv", 6, 0, []protocol.Slice{slice(0, 6, 0)}})},
		calls: []call{
			{protocol.ResourceCore, 0 + 1, "", "no pod"},
			{protocol.ResourceMemory, 6, "on/srv", ""},
		},
	}, {
		name: "offline pod: core-greedy, not core",
		pods: []*v1.Pod{makePod("off", 0, protocol.ClassOffline, ctr{"train", 8, 50, []protocol.Slice{slice(0, 8, 50)}})},
		calls: []call{
			{protocol.ResourceCore, 50, "", "no pod"},
			{protocol.ResourceCoreGreedy, 50, "off/train", ""},
			{protocol.ResourceMemory, 8, "off/train", ""},
		},
	}, {
		name: "multi-container in spec order, whole cards",
		pods: []*v1.Pod{makePod("multi", 0, protocol.ClassGeneral,
			ctr{"a", 2, 20, []protocol.Slice{slice(0, 2, 20)}},
			ctr{"b", 2, 20, []protocol.Slice{slice(1, 2, 20)}},
			ctr{"c", 16, 200, []protocol.Slice{slice(2, 8, 100), slice(3, 8, 100)}})},
		calls: []call{
			{protocol.ResourceMemory, 2, "multi/a", ""},
			{protocol.ResourceMemory, 2, "multi/b", ""},
			{protocol.ResourceCore, 200, "multi/c", ""},
			{protocol.ResourceMemory, 16, "multi/c", ""},
			{protocol.ResourceCore, 20, "multi/a", ""},
		},
	}, {
		name: "identical requests: oldest first, then the next",
		pods: []*v1.Pod{general("young", 5, 4, 30, 1), general("old", 1, 4, 30, 0)},
		calls: []call{
			{protocol.ResourceMemory, 4, "old/main", ""},
			{protocol.ResourceMemory, 4, "young/main", ""},
			// Both pods are in progress now: the older one still wins.
			{protocol.ResourceCore, 30, "old/main", ""},
			{protocol.ResourceCore, 30, "young/main", ""},
		},
	}, {
		name:  "identical requests: the kubelet took in the younger pod first",
		pods:  []*v1.Pod{general("young", 5, 4, 30, 1), general("old", 1, 4, 30, 0)},
		known: []string{"default/young"},
		calls: []call{
			{protocol.ResourceMemory, 4, "young/main", ""},
			{protocol.ResourceCore, 30, "young/main", ""},
			{protocol.ResourceMemory, 4, "", "1 not yet taken in by the kubelet"},
		},
	}, {
		name:  "a pod the kubelet has not taken in is never matched",
		pods:  []*v1.Pod{general("g", 0, 4, 30, 1)},
		known: []string{},
		calls: []call{{protocol.ResourceMemory, 4, "", "1 not yet taken in by the kubelet"}},
	}, {
		name: "a pod in progress comes before an older one",
		pods: []*v1.Pod{general("old", 1, 4, 30, 0), general("young", 5, 4, 20, 1)},
		calls: []call{
			{protocol.ResourceCore, 20, "young/main", ""},
			{protocol.ResourceMemory, 4, "young/main", ""},
			{protocol.ResourceMemory, 4, "old/main", ""},
		},
	}, {
		name:  "same creation time: namespace/name order",
		pods:  []*v1.Pod{general("b", 0, 4, 30, 1), general("a", 0, 4, 30, 0)},
		calls: []call{{protocol.ResourceMemory, 4, "a/main", ""}},
	}, {
		name:  "forged, foreign, terminal, deleting and lying pods are ignored",
		pods:  []*v1.Pod{forged, otherNode, done, deleting, lying},
		calls: []call{{protocol.ResourceMemory, 4, "", "ignored pods: default/forged"}},
	}, {
		name:  "no match names what is there",
		pods:  []*v1.Pod{general("g", 0, 4, 30, 1)},
		calls: []call{{protocol.ResourceMemory, 5, "", "default/g/main wants 4"}},
	}, {
		name:  "spec that disagrees with the assignment is reported",
		pods:  []*v1.Pod{lying},
		calls: []call{{protocol.ResourceMemory, 30, "", "assigned 4 but its spec asks for 30"}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			granted := map[string]bool{}
			g := func(uid, c, r string) bool { return granted[store.Key(uid, c, r)] }
			var known Known
			if tc.known != nil {
				known = func(ns, name string) bool { return slices.Contains(tc.known, ns+"/"+name) }
			}
			for i, c := range tc.calls {
				cand, err := Match(testNode, tc.pods, g, known, c.resource, c.n)
				if c.want == "" {
					if !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), c.errHas) {
						t.Fatalf("call %d: want ErrNoMatch containing %q, got %v", i, c.errHas, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if got := cand.Pod.Name + "/" + cand.Container.Name; got != c.want {
					t.Fatalf("call %d: matched %s, want %s", i, got, c.want)
				}
				granted[store.Key(string(cand.Pod.UID), cand.Container.Name, c.resource)] = true
			}
		})
	}
}

func TestAmount(t *testing.T) {
	c := protocol.ContainerAssignment{Name: "c", Slices: []protocol.Slice{slice(0, 4, 100), slice(1, 4, 100)}}
	tests := []struct {
		class    protocol.Class
		resource string
		want     int64
	}{
		{protocol.ClassGeneral, protocol.ResourceMemory, 8},
		{protocol.ClassGeneral, protocol.ResourceCore, 200},
		{protocol.ClassGeneral, protocol.ResourceCoreGreedy, 0},
		{protocol.ClassOffline, protocol.ResourceCoreGreedy, 200},
		{protocol.ClassOffline, protocol.ResourceCore, 0},
		{protocol.ClassOnline, protocol.ResourceCore, 0},
		{protocol.ClassOnline, protocol.ResourceMemory, 8},
	}
	for _, tc := range tests {
		if got := Amount(tc.class, c, tc.resource); got != tc.want {
			t.Errorf("Amount(%s, %s) = %d, want %d", tc.class, tc.resource, got, tc.want)
		}
	}
}

// AssignmentOf trusts only an assignment made for this pod and for this
// node, on a pod bound to this node.
func TestAssignmentOf(t *testing.T) {
	reassign := func(name string, edit func(p *v1.Pod, a *protocol.Assignment)) *v1.Pod {
		p := general(name, 0, 4, 30, 0)
		a, err := AssignmentOf(p, testNode)
		if err != nil {
			t.Fatal(err)
		}
		edit(p, a)
		setAssignment(p, a)
		return p
	}
	for _, tt := range []struct {
		name string
		pod  *v1.Pod
		want string // part of the error; "" for trusted
	}{
		{"made for this pod and node", general("ok", 0, 4, 30, 0), ""},
		{"another pod's UID", reassign("uid", func(_ *v1.Pod, a *protocol.Assignment) { a.PodUID = "uid-other" }), "was made for pod UID"},
		{"assignment for another node, pod bound here", reassign("node", func(_ *v1.Pod, a *protocol.Assignment) { a.Node = "n2" }), `is for node "n2"`},
		{"pod bound to another node", reassign("bound", func(p *v1.Pod, a *protocol.Assignment) { p.Spec.NodeName, a.Node = "n2", "n2" }), `pod is bound to "n2"`},
		{"no annotation", func() *v1.Pod {
			p := general("none", 0, 4, 30, 0)
			delete(p.Annotations, protocol.AnnotationAssignment)
			return p
		}(), "no " + protocol.AnnotationAssignment},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := AssignmentOf(tt.pod, testNode)
			switch {
			case tt.want == "" && (err != nil || a == nil):
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, %v; want an error with %q", a, err, tt.want)
			}
		})
	}
}
