package grantwriter

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/qgpu-scheduler/qgpu/agent/allocate"
	"github.com/qgpu-scheduler/qgpu/agent/internal/apiretry"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func pod(name, uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: k8stypes.UID("uid-" + uid)}}
}

// TestWriter: grants are written in order; a pod deleted before its write
// is skipped without holding up the writes behind it.
func TestWriter(t *testing.T) {
	old := apiretry.Base
	apiretry.Base = time.Millisecond
	t.Cleanup(func() { apiretry.Base = old })
	a, b := pod("a", "1"), pod("b", "2")
	gone := pod("gone", "3")
	client := fake.NewClientset(a, b)
	w := New(client)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	grant := func(p *v1.Pod, uuid string) *protocol.Assignment {
		return &protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(p.UID), Node: "n1", Class: protocol.ClassGeneral, Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{{UUID: uuid, MemoryGiB: 1, Cores: 10}}}}}
	}
	w.Enqueue(a, grant(a, "GPU-a"))
	w.Enqueue(gone, grant(gone, "GPU-x"))
	w.Enqueue(b, grant(b, "GPU-b"))
	go w.Run(ctx)
	for _, want := range []struct {
		pod  *v1.Pod
		uuid string
	}{{a, "GPU-a"}, {b, "GPU-b"}} {
		var got *protocol.Assignment
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods("default").Get(ctx, want.pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got, err = allocate.GrantOf(p)
			return got != nil, err
		})
		if err != nil {
			t.Fatalf("grant of %s: %v", want.pod.Name, err)
		}
		if len(got.Containers) != 1 || len(got.Containers[0].Slices) != 1 || got.Containers[0].Slices[0].UUID != want.uuid {
			t.Errorf("grant of %s: %+v, want card %s", want.pod.Name, got, want.uuid)
		}
	}
}

// TestEnqueueNeverBlocks: past QueueLength, writes are dropped (the
// reconciler redoes them), not waited for.
func TestEnqueueNeverBlocks(t *testing.T) {
	w := New(fake.NewClientset())
	for i := 0; i < QueueLength+10; i++ {
		w.Enqueue(pod("p", "1"), &protocol.Assignment{})
	}
	if got := len(w.queue); got != QueueLength {
		t.Errorf("queue holds %d, want %d", got, QueueLength)
	}
}
