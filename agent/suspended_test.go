package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/qgpu-scheduler/qgpu/agent/priority"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestSuspensionWriter: a pod frozen and thawed many times a second is
// patched at most once per interval, the last state always lands, and the
// stale annotation of a previous agent is removed.
func TestSuspensionWriter(t *testing.T) {
	off, stale := runningPod("offline", "bbbbbbbb-0000-0000-0000-000000000002"), runningPod("old", "cccccccc-0000-0000-0000-000000000003")
	stale.Annotations = map[string]string{protocol.AnnotationSuspended: `{"since":"2020-01-01T00:00:00Z"}`}
	client := fake.NewClientset(off, stale)
	var mu sync.Mutex
	patches := map[string][]time.Time{}
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		name := a.(k8stesting.PatchAction).GetName()
		patches[name] = append(patches[name], time.Now())
		return false, nil, nil
	})
	w := newSuspensionWriter(client)
	w.every = 200 * time.Millisecond
	w.clearStale([]*v1.Pod{off, stale})
	ctx := context.Background()
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() { defer close(stopped); w.run(ctx, done) }()
	ref := priority.PodRef{UID: string(off.UID), Namespace: "default", Name: "offline"}
	start := time.Now()
	for i := 0; time.Since(start) < time.Second; i++ {
		w.PodSuspended(ref, i%2 == 0, time.Now())
		time.Sleep(5 * time.Millisecond)
	}
	w.PodSuspended(ref, true, time.Now())
	waitFor(t, "offline suspended", func() bool { return annotation(t, client, "offline") != "" })
	w.PodSuspended(ref, false, time.Now())
	close(done) // the final state is written at once
	<-stopped
	if a := annotation(t, client, "offline"); a != "" {
		t.Errorf("final state not written: %q", a)
	}
	if a := annotation(t, client, "old"); a != "" {
		t.Errorf("stale annotation kept: %q", a)
	}
	mu.Lock()
	defer mu.Unlock()
	got := patches["offline"]
	if len(got) < 3 || len(got) > 8 {
		t.Errorf("%d patches for ~1.2 s of flapping every 5ms at most one per 200ms", len(got))
	}
	for i := 1; i < len(got)-1; i++ { // the last one, at shutdown, may come early
		if d := got[i].Sub(got[i-1]); d < 150*time.Millisecond { // flushes are 200ms apart; patches jitter
			t.Errorf("patches %d and %d only %v apart: %v", i-1, i, d, got)
		}
	}
}

func annotation(t *testing.T, client *fake.Clientset, name string) string {
	t.Helper()
	p, err := client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Annotations[protocol.AnnotationSuspended]
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
