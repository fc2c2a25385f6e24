package agent

import (
	"testing"

	"github.com/qgpu-scheduler/qgpu/agent/allocate"
)

// The reconciler corrects records against the kubelet's list under the
// Allocator's lock, with the kubelet's API configured or not: a call
// answered between its read of the records and its list is what moved a
// stale record over a fresh one (agent/reconcile,
// TestRecordAnsweredDuringComparisonKept).
func TestReconcilerHoldsTheAllocatorsLock(t *testing.T) {
	alloc := &allocate.Allocator{}
	for _, socket := range []string{"", "/run/kubelet/pod-resources/kubelet.sock"} {
		a := &agent{cfg: Config{PodResourcesSocket: socket}}
		if rec := a.reconciler(nil, alloc.Exclusive()); rec.Exclusive != alloc.Exclusive() {
			t.Errorf("socket %q: the reconciler's lock is %v, want the Allocator's", socket, rec.Exclusive)
		}
	}
}
