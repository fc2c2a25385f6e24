package mpsd

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
)

// TestFollow: a card the agent asks for whole loses its daemon and goes
// back to the DEFAULT compute mode (marked whole, no longer ready); the
// other card is untouched; asked back to shared it is EXCLUSIVE_PROCESS
// with a daemon again. A card whose daemon runs a server stays shared.
func TestFollow(t *testing.T) {
	bin, record := writeFakeMPS(t)
	root := t.TempDir()
	m := &modes{}
	d := newDaemons(root, bin, m)
	d.MinBackoff = 10 * time.Millisecond
	defer d.Stop()
	cards := []string{"GPU-a", "GPU-b"}
	if err := d.Start(cards); err != nil {
		t.Fatal(err)
	}
	ready := func(u string) string { return filepath.Join(root, u, enforce.MPSReadyFile) }
	whole := func(u string) string { return filepath.Join(root, u, enforce.MPSWholeFile) }
	ask := func(u, what string) {
		if err := os.WriteFile(filepath.Join(root, u, enforce.MPSRequestFile), []byte(what), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitFile(t, ready("GPU-a"), true)
	waitFile(t, ready("GPU-b"), true)

	ask("GPU-a", enforce.MPSRequestWhole)
	d.FollowOnce(cards)
	waitRecord(t, record, "get_server_list "+filepath.Join(root, "GPU-a", "pipe"), "exit GPU-a")
	waitFile(t, whole("GPU-a"), true)
	waitFile(t, ready("GPU-a"), false)
	if _, err := os.Stat(ready("GPU-b")); err != nil {
		t.Error("the other card lost its daemon")
	}
	m.mu.Lock()
	if !slices.Contains(m.log, "GPU-a exclusive=false") || slices.Contains(m.log, "GPU-b exclusive=false") {
		t.Errorf("compute modes %v: want GPU-a back to DEFAULT only", m.log)
	}
	m.mu.Unlock()
	d.FollowOnce(cards) // again: nothing more to do

	ask("GPU-a", enforce.MPSRequestShared)
	d.FollowOnce(cards)
	waitFile(t, ready("GPU-a"), true)
	waitFile(t, whole("GPU-a"), false)
	m.mu.Lock()
	if last := m.log[len(m.log)-1]; last != "GPU-a exclusive=true" {
		t.Errorf("last compute mode change %q, want GPU-a exclusive=true", last)
	}
	m.mu.Unlock()

	// A server with clients on GPU-b: the card stays shared.
	if err := os.WriteFile(filepath.Join(root, "GPU-b", "pipe", "server"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ask("GPU-b", enforce.MPSRequestWhole)
	d.FollowOnce(cards)
	if _, err := os.Stat(whole("GPU-b")); err == nil {
		t.Error("a card with an MPS server running was switched to whole")
	}
	if _, err := os.Stat(ready("GPU-b")); err != nil {
		t.Error("a card with an MPS server running lost its daemon")
	}
}
