package deviceplugin

import (
	"testing"
	"time"
)

// TestRestartBackoff: failed starts are retried after 1 s, doubling to a
// 30 s cap, each delay with at most 10 % jitter; a fresh backoff (what a
// success or a re-created kubelet.sock gives) starts at 1 s again.
func TestRestartBackoff(t *testing.T) {
	b := restartBackoff()
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30, 30}
	for i, w := range want {
		w *= time.Second
		got := b.Step()
		if got < w || got > w+w/10 {
			t.Errorf("retry %d after %v, want %v to %v", i+1, got, w, w+w/10)
		}
	}
	fresh := restartBackoff()
	if got := fresh.Step(); got > 1100*time.Millisecond {
		t.Errorf("a fresh backoff's first delay %v, want about 1s", got)
	}
}
