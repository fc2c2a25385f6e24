package mpsd

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
)

// TestDaemonsShmPerCard: each card gets its own shared memory directory,
// <root>/<uuid>/shm (sticky, writable by all, with the mark), and every
// nvidia-cuda-mps-control of the card, the daemon and its control
// commands, runs through Isolate with that card's directory; the daemon's
// PID is in <root>/<uuid>/daemon.pid while it runs. Fails on eebf961,
// which had one <root>/shm for every card.
func TestDaemonsShmPerCard(t *testing.T) {
	bin, record := writeFakeMPS(t)
	root := t.TempDir()
	d := New(root, bin, &modes{}, klog.Background())
	// Stands in for ShmNamespace: records the card's directory, then runs argv.
	d.Isolate = func(ctx context.Context, shm string, argv []string) *exec.Cmd {
		script := `echo "isolate $0 $*" >> "` + record + `"; exec "$@"`
		return exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", script, shm}, argv...)...)
	}
	if err := d.Start([]string{"GPU-a", "GPU-b"}); err != nil {
		t.Fatal(err)
	}
	shmA, shmB := filepath.Join(root, "GPU-a", enforce.MPSShmDir), filepath.Join(root, "GPU-b", enforce.MPSShmDir)
	waitRecord(t, record, "isolate "+shmA+" "+bin+" -f", "isolate "+shmB+" "+bin+" -f", "start GPU-a", "start GPU-b")
	for _, dir := range []string{shmA, shmB} {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() || fi.Mode()&(os.ModePerm|os.ModeSticky) != 0o777|os.ModeSticky {
			t.Errorf("%s: %v %v, want a sticky directory writable by all", dir, fi, err)
		}
		if _, err := os.Stat(filepath.Join(dir, ShmMarker)); err != nil {
			t.Errorf("no mark in %s: %v", dir, err)
		}
	}
	pidFile := filepath.Join(root, "GPU-a", enforce.MPSDaemonPIDFile)
	waitFile(t, pidFile, true)
	raw, _ := os.ReadFile(pidFile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || syscall.Kill(pid, 0) != nil {
		t.Errorf("daemon.pid %q: not a running process (%v)", raw, err)
	}
	d.Stop()
	data := waitRecord(t, record, "quit "+filepath.Join(root, "GPU-a", "pipe"))
	if !strings.Contains(data, "isolate "+shmA+" "+bin+"\n") {
		t.Errorf("the quit command of GPU-a did not run with its shared memory:\n%s", data)
	}
	waitFile(t, pidFile, false)
}

// TestShmNamespace: the production Isolate re-runs this binary's
// mps-shm-exec in a mount namespace of its own.
func TestShmNamespace(t *testing.T) {
	cmd := ShmNamespace("/usr/bin/qgpu-agent")(context.Background(), "/run/qgpu/mps/GPU-a/shm", []string{"nvidia-cuda-mps-control", "-f"})
	if diff := cmp.Diff([]string{"/usr/bin/qgpu-agent", ShmExecCommand, "/run/qgpu/mps/GPU-a/shm", "nvidia-cuda-mps-control", "-f"}, cmd.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	if cmd.SysProcAttr == nil || cmd.SysProcAttr.Unshareflags&syscall.CLONE_NEWNS == 0 {
		t.Errorf("SysProcAttr %+v: want a new mount namespace", cmd.SysProcAttr)
	}
}

type fakeShmSys struct {
	self, parent string
	mountErr     error
	calls        []string
}

func (f *fakeShmSys) Readlink(path string) (string, error) {
	if path == "/proc/self/ns/mnt" {
		return f.self, nil
	}
	return f.parent, nil
}

func (f *fakeShmSys) Mount(source, target string) error {
	f.calls = append(f.calls, "mount "+source+" "+target)
	return f.mountErr
}

func (f *fakeShmSys) LookPath(file string) (string, error) { return "/usr/bin/" + file, nil }

func (f *fakeShmSys) Exec(path string, argv, _ []string) error {
	f.calls = append(f.calls, "exec "+path+" "+strings.Join(argv, " "))
	return nil
}

// TestExecWithShm: mps-shm-exec binds the card's directory on /dev/shm and
// becomes the control binary, only in a mount namespace of its own (in
// its parent's it would cover the /dev/shm of the whole pod), and not at
// all when the bind fails.
func TestExecWithShm(t *testing.T) {
	argv := []string{"nvidia-cuda-mps-control", "-f"}
	own := &fakeShmSys{self: "mnt:[2]", parent: "mnt:[1]"}
	if err := execWithShm("/run/qgpu/mps/GPU-a/shm", argv, own); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"mount /run/qgpu/mps/GPU-a/shm /dev/shm", "exec /usr/bin/nvidia-cuda-mps-control nvidia-cuda-mps-control -f"}, own.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	same := &fakeShmSys{self: "mnt:[1]", parent: "mnt:[1]"}
	if err := execWithShm("/run/qgpu/mps/GPU-a/shm", argv, same); !errors.Is(err, errSameNamespace) || len(same.calls) != 0 {
		t.Errorf("in the parent's namespace: %v, calls %v", err, same.calls)
	}
	failing := &fakeShmSys{self: "mnt:[2]", parent: "mnt:[1]", mountErr: syscall.EACCES}
	if err := execWithShm("/run/qgpu/mps/GPU-a/shm", argv, failing); err == nil || !strings.Contains(err.Error(), "AppArmor") || len(failing.calls) != 1 {
		t.Errorf("a refused bind: %v, calls %v", err, failing.calls)
	}
	if err := execWithShm("shm", argv, own); err == nil {
		t.Error("a relative directory: no error")
	}
}
