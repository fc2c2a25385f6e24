package allocate

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// FuzzAssignmentReading feeds arbitrary assignment and grant annotations
// through the reading path: nothing may panic, and whatever is accepted must
// be for this pod on this node.
func FuzzAssignmentReading(f *testing.F) {
	good := general("g", 0, 4, 30, 1)
	f.Add(good.Annotations[protocol.AnnotationAssignment], int64(4))
	f.Add(`{"version":"qgpu.io/v1","podUID":"uid-g","node":"n1","class":"general","containers":[{"name":"main","slices":[{"index":0,"uuid":"x","memoryGiB":1,"cores":100}]}]}`, int64(1))
	f.Add(`{}`, int64(0))
	f.Add(`null`, int64(-1))
	f.Fuzz(func(t *testing.T, value string, n int64) {
		pod := general("g", 0, 4, 30, 1)
		pod.Annotations[protocol.AnnotationAssignment] = value
		pod.Annotations[protocol.AnnotationGrant] = value
		a, err := AssignmentOf(pod, testNode)
		if err == nil && (a.PodUID != string(pod.UID) || a.Node != testNode) {
			t.Fatalf("accepted an assignment for %s on %s", a.PodUID, a.Node)
		}
		_, _ = GrantOf(pod)
		never := func(string, string, string) bool { return false }
		for _, r := range protocol.Resources {
			if c, err := Match(testNode, []*v1.Pod{pod}, never, nil, r, n); err == nil && Amount(a.Class, c.Container, r) != n {
				t.Fatalf("matched a container that does not hold %d of %s", n, r)
			}
		}
	})
}
