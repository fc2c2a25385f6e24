package mpsd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
)

func TestCeilingCommands(t *testing.T) {
	c := enforce.MPSCeiling{MemoryMiB: 8192, ThreadPercentage: 50}
	for _, tc := range []struct {
		name    string
		servers []string
		want    []string
	}{
		{"no server: the defaults bind the next one", nil, []string{
			"set_default_device_pinned_mem_limit 0 8192M", "set_default_active_thread_percentage 50"}},
		{"running servers: each is set after the defaults", []string{"4242", "4343"}, []string{
			"set_default_device_pinned_mem_limit 0 8192M", "set_default_active_thread_percentage 50",
			"set_device_pinned_mem_limit 4242 0 8192M", "set_active_thread_percentage 4242 50",
			"set_device_pinned_mem_limit 4343 0 8192M", "set_active_thread_percentage 4343 50"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ceilingCommands(c, tc.servers)); diff != "" {
				t.Errorf("commands (-want +got):\n%s", diff)
			}
		})
	}
}

// commandsIn returns the control commands (not the daemon's start, exit
// and crash lines) the fake recorded for pipe, in order.
func commandsIn(record, pipe string) []string {
	raw, _ := os.ReadFile(record)
	var out []string
	for _, l := range strings.Split(string(raw), "\n") {
		if cmd, ok := strings.CutSuffix(l, " "+pipe); ok && !strings.HasPrefix(cmd, "start ") {
			out = append(out, cmd)
		}
	}
	return out
}

func writeCeiling(t *testing.T, root, uuid, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, uuid), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, uuid, enforce.MPSCeilingFile), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func applied(root, uuid string) string {
	raw, _ := os.ReadFile(filepath.Join(root, uuid, enforce.MPSCeilingAppliedFile))
	return string(raw)
}

// TestDaemonsCeiling: the ceiling is in force through the control pipe
// before the card is ready; a new ceiling reaches the defaults and the
// running server; a daemon that crashed gets it again before it is ready
// again; a bad file is refused naming the file and its text, and nothing
// changes.
func TestDaemonsCeiling(t *testing.T) {
	bin, record := writeFakeMPS(t)
	root := t.TempDir()
	d := newDaemons(root, bin, &modes{})
	d.MinBackoff = 10 * time.Millisecond
	defer d.Stop()
	first := enforce.MPSCeiling{MemoryMiB: 4096, ThreadPercentage: 30}.String()
	writeCeiling(t, root, "GPU-a", first)
	if err := d.Start([]string{"GPU-a"}); err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(root, "GPU-a", "pipe")
	waitFile(t, filepath.Join(root, "GPU-a", enforce.MPSReadyFile), true)
	want := []string{"get_server_list", "set_default_device_pinned_mem_limit 0 4096M", "set_default_active_thread_percentage 30"}
	if diff := cmp.Diff(want, commandsIn(record, pipe)); diff != "" {
		t.Fatalf("commands before ready (-want +got):\n%s", diff)
	}
	if got := applied(root, "GPU-a"); got != first {
		t.Errorf("applied %q, want %q", got, first)
	}

	// A server runs: the new ceiling reaches it as well as the defaults.
	if err := os.WriteFile(filepath.Join(pipe, "server"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	second := enforce.MPSCeiling{MemoryMiB: 8192, ThreadPercentage: 50}.String()
	writeCeiling(t, root, "GPU-a", second)
	d.FollowOnce([]string{"GPU-a"})
	want = append(want, "get_server_list", "set_default_device_pinned_mem_limit 0 8192M", "set_default_active_thread_percentage 50",
		"set_device_pinned_mem_limit 4242 0 8192M", "set_active_thread_percentage 4242 50")
	if diff := cmp.Diff(want, commandsIn(record, pipe)); diff != "" {
		t.Fatalf("commands after a new ceiling (-want +got):\n%s", diff)
	}
	d.FollowOnce([]string{"GPU-a"}) // the same text: nothing more
	if n := len(commandsIn(record, pipe)); n != len(want) {
		t.Errorf("%d commands after an unchanged ceiling, want %d", n, len(want))
	}

	for _, bad := range []string{"memory_mib=0 active_thread_percentage=50", "memory_mib=8192 active_thread_percentage=101",
		"memory_mib=8192", "memory_mib=8G active_thread_percentage=50", "memory_mib=8192 active_thread_percentage=50 uid=0", ""} {
		writeCeiling(t, root, "GPU-a", bad)
		d.mu.Lock()
		m := d.daemons["GPU-a"]
		d.mu.Unlock()
		err := d.syncCeiling(m)
		path := filepath.Join(root, "GPU-a", enforce.MPSCeilingFile)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "\""+bad+"\"") {
			t.Errorf("ceiling %q: err = %v, want a refusal naming %s and the text", bad, err, path)
		}
		d.FollowOnce([]string{"GPU-a"})
		if n := len(commandsIn(record, pipe)); n != len(want) {
			t.Errorf("ceiling %q: %d commands, want %d (nothing sent)", bad, n, len(want))
		}
		if got := applied(root, "GPU-a"); got != second {
			t.Errorf("ceiling %q: applied %q, want %q unchanged", bad, got, second)
		}
	}

	// A crash forgets the ceiling; the restarted daemon gets it again
	// before the card is ready.
	writeCeiling(t, root, "GPU-a", second)
	os.Remove(filepath.Join(pipe, "server"))
	os.WriteFile(filepath.Join(pipe, "crash"), nil, 0o644)
	waitRecord(t, record, "crash GPU-a")
	waitCount(t, record, "start GPU-a", 2)
	waitCount(t, record, "set_default_device_pinned_mem_limit 0 8192M "+pipe, 2)
	waitFile(t, filepath.Join(root, "GPU-a", enforce.MPSReadyFile), true)
	if got := commandsIn(record, pipe); strings.Count(strings.Join(got, "\n"), "set_default_device_pinned_mem_limit 0 8192M") != 2 {
		t.Errorf("after a restart the ceiling was not put in force again:\n%s", strings.Join(got, "\n"))
	}
	if got := applied(root, "GPU-a"); got != second {
		t.Errorf("applied after a restart %q, want %q", got, second)
	}
}

// TestDaemonsBadCeilingAtStart: a daemon whose card has a ceiling it
// cannot put in force leaves the card unready (a client of it would get
// the whole card) until the file is right.
func TestDaemonsBadCeilingAtStart(t *testing.T) {
	bin, record := writeFakeMPS(t)
	root := t.TempDir()
	d := newDaemons(root, bin, &modes{})
	defer d.Stop()
	writeCeiling(t, root, "GPU-a", "memory_mib=-1 active_thread_percentage=50")
	if err := d.Start([]string{"GPU-a"}); err != nil {
		t.Fatal(err)
	}
	waitRecord(t, record, "start GPU-a")
	time.Sleep(200 * time.Millisecond) // asserting absence
	ready := filepath.Join(root, "GPU-a", enforce.MPSReadyFile)
	if _, err := os.Stat(ready); err == nil {
		t.Fatal("card ready with a ceiling refused")
	}
	if got := commandsIn(record, filepath.Join(root, "GPU-a", "pipe")); len(got) != 0 {
		t.Errorf("commands sent for a refused ceiling: %q", got)
	}
	writeCeiling(t, root, "GPU-a", "memory_mib=1024 active_thread_percentage=50")
	waitFile(t, ready, true)
}

// TestDaemonsCeilingSimulated: without a binary (fake cards) the ceiling
// is checked and marked in force; nothing runs.
func TestDaemonsCeilingSimulated(t *testing.T) {
	root := t.TempDir()
	d := New(root, "", &modes{}, klog.Background())
	defer d.Stop()
	if err := d.Start([]string{"GPU-a"}); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(root, "GPU-a", enforce.MPSReadyFile), true)
	text := enforce.MPSCeiling{MemoryMiB: 2048, ThreadPercentage: 100}.String()
	writeCeiling(t, root, "GPU-a", text)
	d.FollowOnce([]string{"GPU-a"})
	if got := applied(root, "GPU-a"); got != text {
		t.Errorf("applied %q, want %q", got, text)
	}
}
