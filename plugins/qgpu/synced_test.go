package qgpu

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

// TestWaitSynced: PreFilter waits for the informers while one has not
// synced, gives up with the context, and once all have synced answers
// without asking them again (no poller per cycle).
func TestWaitSynced(t *testing.T) {
	var ready atomic.Bool
	var asked atomic.Int64
	p := &QGPU{synced: []cache.InformerSynced{
		func() bool { asked.Add(1); return true },
		func() bool { asked.Add(1); return ready.Load() },
	}}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if p.waitSynced(ctx) {
		t.Fatal("waitSynced = true before the second informer synced")
	}

	time.AfterFunc(20*time.Millisecond, func() { ready.Store(true) })
	if !p.waitSynced(context.Background()) {
		t.Fatal("waitSynced = false after the informers synced")
	}
	before := asked.Load()
	for range 100 {
		if !p.waitSynced(context.Background()) {
			t.Fatal("waitSynced = false once synced")
		}
	}
	if n := asked.Load() - before; n != 0 {
		t.Errorf("the informers were asked %d times after all had synced, want 0", n)
	}
}
