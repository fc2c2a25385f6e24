package enforce

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// fakeMPSControl is a stand-in for nvidia-cuda-mps-control: with -f it
// records its start and runs until a quit (or a crash) is asked for in its
// pipe directory; without arguments it reads a command from stdin, as the
// real control client does, and records it.
const fakeMPSControl = `#!/bin/sh
rec="$(dirname "$0")/record"
if [ "$1" = "-f" ]; then
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

func waitRecord(t *testing.T, record string, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, _ := os.ReadFile(record)
		ok := true
		for _, w := range want {
			ok = ok && strings.Count(string(data), w) >= 1
		}
		if ok {
			return string(data)
		}
		if time.Now().After(deadline) {
			t.Fatalf("record lacks %q:\n%s", want, data)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMPSDaemons: one daemon per card with its own pipe and log directories,
// restarted after a crash, quit cleanly on Stop; the backend hands the
// card's pipe directory and the per-client limits to the container.
func TestMPSDaemons(t *testing.T) {
	bin, record := writeFakeMPS(t)
	root := t.TempDir()
	d := NewMPSDaemons(root, bin, klog.Background())
	d.MinBackoff, d.MaxBackoff = 20*time.Millisecond, 100*time.Millisecond
	if err := d.Start([]string{"GPU-a", "GPU-b"}); err != nil {
		t.Fatal(err)
	}
	pipeA := filepath.Join(root, "GPU-a", "pipe")
	waitRecord(t, record, "start GPU-a "+pipeA+" "+filepath.Join(root, "GPU-a", "log"), "start GPU-b ")

	b, err := New(NameMPS, Options{MPS: d})
	if err != nil {
		t.Fatal(err)
	}
	slice := []protocol.Slice{{Index: 0, UUID: "GPU-a", MemoryGiB: 4, Cores: 30}}
	mem, err := b.Allocate(Request{Resource: protocol.ResourceMemory, Class: protocol.ClassOffline, Policy: protocol.PolicyFixedShare, Slices: slice})
	if err != nil {
		t.Fatal(err)
	}
	if mem.Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=4096M" || mem.Mounts[0].HostPath != pipeA {
		t.Errorf("memory answer %v %v", mem.Envs, mem.Mounts)
	}
	core, _ := b.Allocate(Request{Resource: protocol.ResourceCoreGreedy, Class: protocol.ClassOffline, Policy: protocol.PolicyFixedShare, Slices: slice})
	if core.Envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "30" {
		t.Errorf("core answer %v", core.Envs)
	}

	os.WriteFile(filepath.Join(pipeA, "crash"), nil, 0o644)
	data := waitRecord(t, record, "crash GPU-a")
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(data, "start GPU-a") < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		raw, _ := os.ReadFile(record)
		data = string(raw)
	}
	if strings.Count(data, "start GPU-a") != 2 || strings.Count(data, "start GPU-b") != 1 {
		t.Fatalf("after a crash of GPU-a:\n%s", data)
	}

	d.Stop()
	raw, _ := os.ReadFile(record)
	data = string(raw)
	for _, want := range []string{"quit " + pipeA, "exit GPU-a", "exit GPU-b"} {
		if !strings.Contains(data, want) {
			t.Errorf("after Stop, record lacks %q:\n%s", want, data)
		}
	}
	if _, err := d.PipeDir("GPU-c"); err == nil {
		t.Error("PipeDir after Stop started a daemon")
	}
}

func TestMPSDaemonsMissingBinary(t *testing.T) {
	d := NewMPSDaemons(t.TempDir(), filepath.Join(t.TempDir(), "absent"), klog.Background())
	defer d.Stop()
	if _, err := d.PipeDir("GPU-a"); err == nil || !strings.Contains(err.Error(), "--mps-control-bin") {
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
