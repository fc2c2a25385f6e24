package qgpu

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestPodUpdateHintClaimStatus: the resource-claim controller creates a
// pod's claim from its template, then names it in the pod's
// status.resourceClaimStatuses. A cycle requeued by the claim's creation
// that runs between the two finds no claim yet ("not created yet"), and
// the status update must requeue the pod again; skipped, the pod waited
// for the queue's 5-minute flush (make e2e-node's DRA leg: dra-offline
// Pending after two attempts 140 ms apart).
func TestPodUpdateHintClaimStatus(t *testing.T) {
	p := newPlugin(t, nil)
	pending := &v1.Pod{Spec: v1.PodSpec{
		SchedulerName:  protocol.SchedulerName,
		ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("offline")}},
		Containers:     []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
	}}
	pending.Namespace, pending.Name, pending.UID = "default", "p", "uid-p"
	named := pending.DeepCopy()
	named.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("p-gpu-x7k2q")}}
	conditions := named.DeepCopy()
	conditions.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse}}
	for _, tt := range []struct {
		name     string
		old, new *v1.Pod
		want     fwk.QueueingHint
	}{
		{"its claim named in its status", pending, named, fwk.Queue},
		{"a condition only", named, conditions, fwk.QueueSkip},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.isSchedulableAfterPodUpdate(klog.Background(), pending, tt.old, tt.new)
			if err != nil || got != tt.want {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
