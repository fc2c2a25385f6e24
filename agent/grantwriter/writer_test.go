package grantwriter

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/qgpu-scheduler/qgpu/agent/allocate"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func pod(name, uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: k8stypes.UID("uid-" + uid)}}
}

// TestWriter: grants are written in order; a pod deleted before its write
// is skipped without holding up the writes behind it.
func TestWriter(t *testing.T) {
	old := BaseDelay
	BaseDelay = time.Millisecond
	t.Cleanup(func() { BaseDelay = old })
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

// TestEnqueueNeverDrops: a burst of grants larger than any queue bound
// (the writer of before dropped past 256, leaving the annotations to the
// reconciler's next pass) is written whole, and a pod queued twice before
// its write gets its latest grant.
func TestEnqueueNeverDrops(t *testing.T) {
	const n = 300
	var objs []runtime.Object
	for i := range n {
		objs = append(objs, pod(fmt.Sprintf("p%d", i), fmt.Sprint(i)))
	}
	client := fake.NewClientset(objs...)
	w := New(client)
	grant := func(uid k8stypes.UID, uuid string) *protocol.Assignment {
		return &protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(uid), Node: "n1", Class: protocol.ClassGeneral,
			Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{{UUID: uuid, MemoryGiB: 1, Cores: 10}}}}}
	}
	for _, o := range objs {
		p := o.(*v1.Pod)
		w.Enqueue(p, grant(p.UID, "GPU-old"))
		w.Enqueue(p, grant(p.UID, "GPU-"+p.Name))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		written := 0
		for i := range pods.Items {
			g, err := allocate.GrantOf(&pods.Items[i])
			if err != nil {
				return false, err
			}
			if g != nil && g.Containers[0].Slices[0].UUID == "GPU-"+pods.Items[i].Name {
				written++
			}
		}
		return written == n, nil
	})
	if err != nil {
		t.Fatalf("not every pod's latest grant written: %v", err)
	}
}

// TestFailedWriteRetried: a write the API server refuses is queued again
// with backoff and lands once the server takes it.
func TestFailedWriteRetried(t *testing.T) {
	old := BaseDelay
	BaseDelay = time.Millisecond
	t.Cleanup(func() { BaseDelay = old })
	p := pod("a", "1")
	client := fake.NewClientset(p)
	failures := 3
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures > 0 {
			failures--
			return true, nil, apierrors.NewServiceUnavailable("busy")
		}
		return false, nil, nil
	})
	w := New(client)
	w.Enqueue(p, &protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(p.UID), Node: "n1", Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{{UUID: "GPU-a", MemoryGiB: 1, Cores: 10}}}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := client.CoreV1().Pods("default").Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		g, err := allocate.GrantOf(got)
		return g != nil, err
	})
	if err != nil {
		t.Fatalf("grant not written after %d refusals: %v", 3, err)
	}
}
