package mpsd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
)

// fakeMPSControl is a stand-in for nvidia-cuda-mps-control: with -f it
// creates its control pipe (unless told not to), records its start and runs until a quit (or a crash) is asked for in its
// pipe directory; without arguments it reads a command from stdin, as the
// real control client does, and records it.
const fakeMPSControl = `#!/bin/sh
rec="$(dirname "$0")/record"
if [ "$1" = "-f" ]; then
  [ -e "$CUDA_MPS_PIPE_DIRECTORY/nocontrol" ] || touch "$CUDA_MPS_PIPE_DIRECTORY/control"
  echo "start $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY" >> "$rec"
  while :; do
    if [ -e "$CUDA_MPS_PIPE_DIRECTORY/crash" ]; then rm -f "$CUDA_MPS_PIPE_DIRECTORY/crash"; echo "crash $CUDA_VISIBLE_DEVICES" >> "$rec"; exit 1; fi
    if [ -e "$CUDA_MPS_PIPE_DIRECTORY/quit" ]; then rm -f "$CUDA_MPS_PIPE_DIRECTORY/quit"; echo "exit $CUDA_VISIBLE_DEVICES" >> "$rec"; exit 0; fi
    sleep 0.01
  done
fi
read cmd
echo "$cmd $CUDA_MPS_PIPE_DIRECTORY" >> "$rec"
[ "$cmd" = quit ] && touch "$CUDA_MPS_PIPE_DIRECTORY/quit"
[ "$cmd" = get_server_list ] && [ -e "$CUDA_MPS_PIPE_DIRECTORY/server" ] && echo 4242
exit 0
`

func writeFakeMPS(t *testing.T) (bin, record string) {
	t.Helper()
	dir := t.TempDir()
	bin = filepath.Join(dir, "nvidia-cuda-mps-control")
	if err := os.WriteFile(bin, []byte(fakeMPSControl), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, filepath.Join(dir, "record")
}

// patience bounds the tests' waits for the fake daemons (shell scripts):
// only a failing test waits it out, and a loaded CI machine can take
// seconds to start one.
const patience = time.Minute

// newDaemons is New with the quit and control command timeout raised to
// patience: a control command or a quit that a loaded machine runs slowly
// must not be taken for a daemon that does not answer.
func newDaemons(root, bin string, modes ComputeModes) *Daemons {
	d := New(root, bin, modes, klog.Background())
	d.QuitTimeout = patience
	return d
}

// waitUntil polls cond until it holds, failing the test after patience.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(patience); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, patience)
		}
	}
}

// waitRecord waits until the record holds every string of want (once is
// enough), and returns it.
func waitRecord(t *testing.T, record string, want ...string) string {
	t.Helper()
	var data []byte
	holds := func() bool {
		data, _ = os.ReadFile(record)
		for _, w := range want {
			if !strings.Contains(string(data), w) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(patience); !holds(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("record lacks %q:\n%s", want, data)
		}
	}
	return string(data)
}

// waitCount waits until the record holds s at least n times, and returns it.
func waitCount(t *testing.T, record, s string, n int) string {
	t.Helper()
	var data []byte
	waitUntil(t, fmt.Sprintf("%d× %q in the record", n, s), func() bool {
		data, _ = os.ReadFile(record)
		return strings.Count(string(data), s) >= n
	})
	return string(data)
}

// modes records compute mode changes.
type modes struct {
	mu   sync.Mutex
	log  []string
	fail string
}

func (m *modes) SetExclusiveProcess(uuid string, on bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if uuid == m.fail {
		return errors.New("not permitted")
	}
	m.log = append(m.log, fmt.Sprintf("%s exclusive=%v", uuid, on))
	return nil
}

func waitFile(t *testing.T, path string, exists bool) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%s exists=%v", path, exists), func() bool {
		_, err := os.Stat(path)
		return (err == nil) == exists
	})
}

// TestDaemons: per card EXCLUSIVE_PROCESS first, then one daemon with its
// own pipe and log directories; the card is ready once its control pipe
// exists and not while it is down; restarted after a crash; quit cleanly
// on Stop, and the cards set back to DEFAULT.
func TestDaemons(t *testing.T) {
	bin, record := writeFakeMPS(t)
	root := t.TempDir()
	m := &modes{}
	d := newDaemons(root, bin, m)
	d.MinBackoff, d.MaxBackoff = 20*time.Millisecond, 100*time.Millisecond
	if err := d.Start([]string{"GPU-a", "GPU-b"}); err != nil {
		t.Fatal(err)
	}
	pipeA := filepath.Join(root, "GPU-a", "pipe")
	readyA := filepath.Join(root, "GPU-a", enforce.MPSReadyFile)
	waitRecord(t, record, "start GPU-a "+pipeA+" "+filepath.Join(root, "GPU-a", "log"), "start GPU-b ")
	waitFile(t, readyA, true)
	if _, shm, err := (enforce.MPSRoot{Root: root}).Dirs("GPU-a"); err != nil || shm != filepath.Join(root, "GPU-a", enforce.MPSShmDir) {
		t.Errorf("the card's shared memory directory: %q, %v", shm, err)
	}

	os.WriteFile(filepath.Join(pipeA, "crash"), nil, 0o644)
	waitRecord(t, record, "crash GPU-a")
	data := waitCount(t, record, "start GPU-a", 2)
	if strings.Count(data, "start GPU-a") != 2 || strings.Count(data, "start GPU-b") != 1 {
		t.Fatalf("after a crash of GPU-a:\n%s", data)
	}
	waitFile(t, readyA, true)

	d.Stop()
	raw, _ := os.ReadFile(record)
	data = string(raw)
	for _, want := range []string{"quit " + pipeA, "exit GPU-a", "exit GPU-b"} {
		if !strings.Contains(data, want) {
			t.Errorf("after Stop, record lacks %q:\n%s", want, data)
		}
	}
	waitFile(t, readyA, false)
	m.mu.Lock()
	got := append([]string(nil), m.log...)
	m.mu.Unlock()
	sort.Strings(got)
	want := []string{"GPU-a exclusive=false", "GPU-a exclusive=true", "GPU-b exclusive=false", "GPU-b exclusive=true"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("compute modes %v, want %v", got, want)
	}
	if err := d.Start([]string{"GPU-c"}); err == nil {
		t.Error("Start after Stop started a daemon")
	}
}

// TestDaemonsNoControlPipe: a daemon that never creates its control pipe
// leaves the card unready (the agent refuses it).
func TestDaemonsNoControlPipe(t *testing.T) {
	bin, record := writeFakeMPS(t)
	root := t.TempDir()
	d := newDaemons(root, bin, &modes{})
	d.ReadyTimeout = 50 * time.Millisecond
	if err := os.MkdirAll(filepath.Join(root, "GPU-a", "pipe"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The fake creates its control pipe only when told to.
	os.WriteFile(filepath.Join(root, "GPU-a", "pipe", "nocontrol"), nil, 0o644)
	if err := d.Start([]string{"GPU-a"}); err != nil {
		t.Fatal(err)
	}
	waitRecord(t, record, "start GPU-a")
	time.Sleep(200 * time.Millisecond) // past ReadyTimeout; asserting absence
	if _, err := os.Stat(filepath.Join(root, "GPU-a", enforce.MPSReadyFile)); err == nil {
		t.Error("card ready without a control pipe")
	}
	d.Stop()
}

// TestDaemonsComputeModeRefused: a card whose compute mode cannot be set
// gets no daemon; the others start.
func TestDaemonsComputeModeRefused(t *testing.T) {
	bin, record := writeFakeMPS(t)
	d := newDaemons(t.TempDir(), bin, &modes{fail: "GPU-a"})
	defer d.Stop()
	err := d.Start([]string{"GPU-a", "GPU-b"})
	if err == nil || !strings.Contains(err.Error(), "card GPU-a") || !strings.Contains(err.Error(), "EXCLUSIVE_PROCESS") {
		t.Fatalf("err = %v", err)
	}
	data := waitRecord(t, record, "start GPU-b")
	if strings.Contains(data, "start GPU-a") {
		t.Errorf("GPU-a started without its compute mode:\n%s", data)
	}
}

// TestDaemonsSimulated: without a binary (fake cards) the cards are
// marked ready and nothing runs.
func TestDaemonsSimulated(t *testing.T) {
	root := t.TempDir()
	d := New(root, "", &modes{}, klog.Background())
	if err := d.Start([]string{"GPU-a"}); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(root, "GPU-a", enforce.MPSReadyFile), true)
	d.Stop()
	waitFile(t, filepath.Join(root, "GPU-a", enforce.MPSReadyFile), false)
}

func TestDaemonsMissingBinary(t *testing.T) {
	d := New(t.TempDir(), filepath.Join(t.TempDir(), "absent"), &modes{}, klog.Background())
	defer d.Stop()
	if err := d.Start([]string{"GPU-a"}); err == nil || !strings.Contains(err.Error(), "--mps-control-bin") {
		t.Errorf("missing binary: %v", err)
	}
}

// The restart delays of a crashing MPS daemon: min, doubling, capped at max,
// and min again after a run longer than max.
func TestRestartDelays(t *testing.T) {
	r := newRestartDelays(time.Second, time.Minute)
	short, long := time.Millisecond, 2*time.Minute
	var got []time.Duration
	for range 8 {
		got = append(got, r.next(short))
	}
	got = append(got, r.next(long), r.next(short))
	s := time.Second
	want := []time.Duration{s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, time.Minute, time.Minute, s, 2 * s}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("delays %v, want %v", got, want)
	}
}

func TestPrepareShm(t *testing.T) {
	root := t.TempDir()
	_, err := PrepareShm(root)
	var fs unix.Statfs_t
	if serr := unix.Statfs(root, &fs); serr != nil {
		t.Fatal(serr)
	}
	if fs.Type == unix.TMPFS_MAGIC {
		if err != nil {
			t.Fatalf("on a tmpfs: %v", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), "not on a tmpfs") || !strings.Contains(err.Error(), root) {
		t.Errorf("not on a tmpfs: %v", err)
	}
}
