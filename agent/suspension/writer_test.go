package suspension

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testclock "k8s.io/utils/clock/testing"

	"github.com/qgpu-scheduler/qgpu/agent/priority"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func runningPod(name, uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Status: v1.PodStatus{Phase: v1.PodRunning}}
}

// patchCounter counts the pod patches by pod name.
func patchCounter(client *fake.Clientset) map[string]int {
	patches := map[string]int{}
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patches[a.(k8stesting.PatchAction).GetName()]++
		return false, nil, nil
	})
	return patches
}

// TestFlushSpacesWrites: a pod frozen and thawed every 5 ms is patched at
// most once per interval, and the state written is the last one wanted.
// Time is given to flush, so nothing depends on the machine's speed.
func TestFlushSpacesWrites(t *testing.T) {
	off := runningPod("offline", "bbbbbbbb-0000-0000-0000-000000000002")
	client := fake.NewClientset(off)
	patches := patchCounter(client)
	w := New(client)
	ctx := context.Background()
	ref := priority.PodRef{UID: string(off.UID), Namespace: "default", Name: "offline"}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var nexts []time.Duration
	for i := 0; i < 200; i++ { // one second of flapping, 5 ms apart
		now := start.Add(time.Duration(i) * 5 * time.Millisecond)
		w.PodSuspended(ref, i%2 == 0, now)
		if next := w.flush(ctx, now, false); next > 0 {
			nexts = append(nexts, next)
		}
	}
	// Writes at 0, 1 s is not reached: one write per Every (1 s) at most.
	if got := patches["offline"]; got != 1 {
		t.Errorf("%d patches in 1 s of flapping, want 1 (one per %v)", got, Every)
	}
	if len(nexts) == 0 || nexts[len(nexts)-1] != 5*time.Millisecond {
		t.Errorf("flush did not say when the next write is due: %v", nexts)
	}
	w.PodSuspended(ref, false, start.Add(time.Second))
	w.flush(ctx, start.Add(time.Second), false)
	if got, a := patches["offline"], annotation(t, client, "offline"); got != 2 || a != "" {
		t.Errorf("after the interval: %d patches, annotation %q; want 2 and the last state (none)", got, a)
	}
	// Nothing changes: nothing is written.
	w.flush(ctx, start.Add(3*time.Second), false)
	if got := patches["offline"]; got != 2 {
		t.Errorf("%d patches with nothing to change, want 2", got)
	}
}

// TestRunWritesFinalStateAndClearsStale: the annotation a previous agent
// left is removed, and when the controller stops, the pending state is
// written at once, inside the interval.
func TestRunWritesFinalStateAndClearsStale(t *testing.T) {
	off, stale := runningPod("offline", "bbbbbbbb-0000-0000-0000-000000000002"), runningPod("old", "cccccccc-0000-0000-0000-000000000003")
	stale.Annotations = map[string]string{protocol.AnnotationSuspended: `{"since":"2020-01-01T00:00:00Z"}`}
	client := fake.NewClientset(off, stale)
	w := New(client)
	clk := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w.clock = clk
	w.ClearStale([]*v1.Pod{off, stale})
	ref := priority.PodRef{UID: string(off.UID), Namespace: "default", Name: "offline"}
	w.PodSuspended(ref, true, clk.Now())
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() { defer close(stopped); w.Run(context.Background(), done) }()
	// The clock never moves: only the kick and the final flush write.
	w.PodSuspended(ref, false, clk.Now())
	close(done)
	<-stopped
	if a := annotation(t, client, "offline"); a != "" {
		t.Errorf("final state not written: %q", a)
	}
	if a := annotation(t, client, "old"); a != "" {
		t.Errorf("stale annotation kept: %q", a)
	}
}

// TestGonePodIsForgotten: a pod deleted (or replaced under its name) is
// dropped rather than retried.
func TestGonePodIsForgotten(t *testing.T) {
	client := fake.NewClientset()
	w := New(client)
	w.PodSuspended(priority.PodRef{UID: "u", Namespace: "default", Name: "gone"}, true, time.Unix(0, 0))
	if next := w.flush(context.Background(), time.Unix(0, 0), false); next != 0 {
		t.Errorf("next write in %v for a gone pod, want none", next)
	}
	if len(w.pods) != 0 {
		t.Errorf("gone pod kept: %+v", w.pods)
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
