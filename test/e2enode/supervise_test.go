package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestStartProcSurvivesThreadExit starts two children from a goroutine
// that then exits locked to its thread, so that the runtime ends the
// thread: the one started with a plain cmd.Start gets its parent-death
// signal (the hazard), the one started by startProc does not.
func TestStartProcSurvivesThreadExit(t *testing.T) {
	type started struct {
		plain, locked *proc
		mainThread    bool
		err           error
	}
	ch := make(chan started, 1)
	release := make(chan struct{})
	defer close(release)
	start := func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if unix.Gettid() == unix.Getpid() {
			// The main thread never exits (the runtime wedges it): try
			// another. This goroutine keeps the main thread until the test
			// ends, so that the next try runs on another thread (with
			// GOMAXPROCS=1 every try landed on the main thread, forever).
			ch <- started{mainThread: true}
			<-release
			runtime.UnlockOSThread()
			return
		}
		plainCmd := exec.Command("sleep", "60")
		plainCmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := plainCmd.Start(); err != nil {
			ch <- started{err: err}
			return
		}
		plain := &proc{cmd: plainCmd, done: make(chan struct{})}
		go func() { plain.err = plainCmd.Wait(); close(plain.done) }()
		locked, err := startProc(exec.Command("sleep", "60"), syscall.SIGKILL)
		ch <- started{plain: plain, locked: locked, err: err}
	}
	go start()
	s := <-ch
	for s.mainThread {
		go start()
		s = <-ch
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	defer s.locked.terminate(time.Second)
	defer s.plain.terminate(time.Second)
	select {
	case <-s.plain.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the plainly started child outlived its thread for 30s: the test shows nothing")
	}
	if s.locked.exited() {
		t.Fatalf("startProc's child died with the caller's thread: %v", s.locked.err)
	}
}

func TestSuperviseRestartsBounded(t *testing.T) {
	defer func(d time.Duration) { restartDelay = d }(restartDelay)
	restartDelay = 10 * time.Millisecond
	dir := t.TempDir()
	steady := &component{dir: dir, name: "containerd", bin: "sleep", args: []string{"60"}}
	failing := &component{dir: dir, name: "kubelet", bin: "sh", args: []string{"-c", "echo run; exit 3"}}
	for _, c := range []*component{steady, failing} {
		if err := c.start(); err != nil {
			t.Fatal(err)
		}
	}
	defer steady.proc.terminate(time.Second)
	err := supervise(context.Background(), steady, failing)
	if err == nil || !strings.Contains(err.Error(), "kubelet exited 4 times") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("supervise: %v; want the kubelet's fourth exit, status 3", err)
	}
	restarts, err := readRestarts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(restarts) != maxRestarts {
		t.Fatalf("%d restarts recorded, want %d: %+v", len(restarts), maxRestarts, restarts)
	}
	for i, r := range restarts {
		want := filepath.Join(dir, "kubelet."+string(rune('1'+i))+".log")
		if r.name != "kubelet" || r.exit != "exit status 3" || r.log != want {
			t.Errorf("restart %d: %+v, want the kubelet, exit status 3, log %s", i, r, want)
		}
		if raw, err := os.ReadFile(r.log); err != nil || string(raw) != "run\n" {
			t.Errorf("kept log %s: %q, %v; want the run's output", r.log, raw, err)
		}
	}
	if steady.restarts != 0 || steady.proc.exited() {
		t.Errorf("the steady component was touched: %d restarts, exited %v", steady.restarts, steady.proc.exited())
	}
}

func TestSuperviseStopsOnContext(t *testing.T) {
	dir := t.TempDir()
	a := &component{dir: dir, name: "containerd", bin: "sleep", args: []string{"60"}}
	b := &component{dir: dir, name: "kubelet", bin: "sleep", args: []string{"60"}}
	for _, c := range []*component{a, b} {
		if err := c.start(); err != nil {
			t.Fatal(err)
		}
		defer c.proc.terminate(time.Second)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := supervise(ctx, a, b); err != nil {
		t.Fatalf("supervise after cancel: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, restartsFile)); !os.IsNotExist(err) {
		t.Errorf("a restart was recorded: %v", err)
	}
}

func TestReportRestarts(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	readyAt := start.Add(10 * time.Second)
	for _, r := range []restart{
		{at: start.Add(2 * time.Second), name: "kubelet", exit: "exit status 1", log: filepath.Join(dir, "kubelet.1.log")},
		{at: start.Add(20 * time.Second), name: "containerd", exit: "signal: killed", log: filepath.Join(dir, "containerd.1.log")},
	} {
		if err := appendRestart(dir, r.at, r.name, stringError(r.exit), r.log); err != nil {
			t.Fatal(err)
		}
	}
	nodes := []*node{{name: "n1", dir: dir}, {name: "n2", dir: t.TempDir()}}
	if got := reportRestarts(start, nodes, readyAt); got != 1 {
		t.Errorf("failures %d, want 1 (the restart after the nodes were Ready)", got)
	}
	if got := reportRestarts(start, nodes, time.Time{}); got != 0 {
		t.Errorf("failures before Ready %d, want 0", got)
	}
	if err := os.WriteFile(filepath.Join(dir, restartsFile), []byte("soon\tkubelet\tx\ty\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readRestarts(dir); err == nil || !strings.Contains(err.Error(), `time "soon"`) {
		t.Errorf("reading a bad time: %v, want an error naming it", err)
	}
}

type stringError string

func (e stringError) Error() string { return string(e) }

// TestSuperviseStopsDuringRestartDelay: a stop that comes while a
// component waits to be restarted ends supervise cleanly, without
// counting the exited component again (its done channel stays closed).
//
// The stop comes once the restart is recorded (restart records it, then
// waits restartDelay), and the delay is long enough that the stop comes
// within it however slow the machine; it ends the wait, so the test does
// not wait the delay.
func TestSuperviseStopsDuringRestartDelay(t *testing.T) {
	defer func(d time.Duration) { restartDelay = d }(restartDelay)
	restartDelay = time.Minute
	for run := 0; run < 10; run++ {
		dir := t.TempDir()
		steady := &component{dir: dir, name: "containerd", bin: "sleep", args: []string{"60"}}
		failing := &component{dir: dir, name: "kubelet", bin: "sh", args: []string{"-c", "exit 3"}}
		for _, c := range []*component{steady, failing} {
			if err := c.start(); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			defer cancel()
			for {
				if restarts, err := readRestarts(dir); err == nil && len(restarts) > 0 {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()
		err := supervise(ctx, steady, failing)
		steady.proc.terminate(time.Second)
		cancel()
		if err != nil {
			t.Fatalf("run %d: supervise after a stop during the restart delay: %v", run, err)
		}
		if restarts, _ := readRestarts(dir); len(restarts) != 1 {
			t.Fatalf("run %d: %d restarts recorded, want the one before the stop", run, len(restarts))
		}
	}
}
