package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// How the e2e program and each node's runner start and keep their
// children, as a real node's init system does.
//
// Invariants:
//   - A child started with a parent-death signal is started, and waited
//     for, from one goroutine locked to its OS thread. Linux sends that
//     signal when the thread that forked the child exits, not the process
//     (golang/go#27505), and the Go runtime ends a thread whenever a
//     goroutine exits locked to it (as the service proxy's listenIn does
//     on an error): an unlocked start could let any such exit kill a node.
//   - The runner restarts a node's containerd or kubelet that exits on its
//     own at most maxRestarts times each, as systemd's Restart=always does
//     (kubelet exits on purpose on some start-up errors and leaves retrying
//     to its babysitter). Every restart is recorded in the node's restarts
//     file, and the exited run's log is kept as <name>.<n>.log, so that
//     the e2e program reports each one (a restart after the nodes were
//     Ready is a failure: see restartsAfter).

// maxRestarts bounds the restarts of one component of one node.
const maxRestarts = 3

// restartDelay is systemd's RestartSec for the kubelet unit, shortened (a
// variable for the tests).
var restartDelay = 2 * time.Second

// proc is a started process and its exit.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process exited; err is set then
	err  error
}

// startProc starts cmd with deathSignal as its parent-death signal (0 for
// none) from a goroutine locked to its thread for the child's whole life.
func startProc(cmd *exec.Cmd, deathSignal syscall.Signal) (*proc, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = deathSignal
	p := &proc{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// terminate sends SIGTERM, and SIGKILL when the process has not exited
// within grace; it returns once the process is gone.
func (p *proc) terminate(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// component is one of a node's long-running programs: its name (and so
// its log, dir/<name>.log) and command line.
type component struct {
	dir, name, bin string
	args           []string
	proc           *proc
	restarts       int
}

func (c *component) start() error {
	log, err := os.Create(filepath.Join(c.dir, c.name+".log"))
	if err != nil {
		return err
	}
	defer log.Close() // the child holds its own descriptor
	cmd := exec.Command(c.bin, c.args...)
	cmd.Stdout, cmd.Stderr = log, log
	p, err := startProc(cmd, syscall.SIGKILL)
	if err != nil {
		return fmt.Errorf("starting %s: %w", c.name, err)
	}
	c.proc = p
	return nil
}

// restart records the exit (restarts file, the log kept as
// <name>.<n>.log), waits restartDelay and starts the component again; it
// fails once the component has been restarted maxRestarts times.
func (c *component) restart(ctx context.Context) error {
	if c.restarts == maxRestarts {
		return fmt.Errorf("%s exited %d times, the last with %v (see %s)", c.name, maxRestarts+1, c.proc.err, c.logPath())
	}
	c.restarts++
	kept := filepath.Join(c.dir, c.name+"."+strconv.Itoa(c.restarts)+".log")
	if err := os.Rename(c.logPath(), kept); err != nil {
		return err
	}
	if err := appendRestart(c.dir, time.Now(), c.name, c.proc.err, kept); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(restartDelay):
	}
	return c.start()
}

func (c *component) logPath() string { return filepath.Join(c.dir, c.name+".log") }

// restartsFile is where a node's runner records its restarts, one line
// each: the time (Unix nanoseconds), the component, its exit, its kept log.
const restartsFile = "restarts"

func appendRestart(dir string, at time.Time, name string, exit error, log string) error {
	f, err := os.OpenFile(filepath.Join(dir, restartsFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%d\t%s\t%v\t%s\n", at.UnixNano(), name, exit, log)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// restart is one line of a restarts file.
type restart struct {
	at              time.Time
	name, exit, log string
}

func readRestarts(dir string) ([]restart, error) {
	raw, err := os.ReadFile(filepath.Join(dir, restartsFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []restart
	for i, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("%s line %d: %q: want 4 tab-separated fields", filepath.Join(dir, restartsFile), i+1, line)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: time %q: %w", filepath.Join(dir, restartsFile), i+1, f[0], err)
		}
		out = append(out, restart{at: time.Unix(0, ns), name: f[1], exit: f[2], log: f[3]})
	}
	return out, nil
}

// tail returns the last n lines of the file at path, each indented, or a
// line saying why it could not be read.
func tail(path string, n int) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "    (" + err.Error() + ")\n"
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}
