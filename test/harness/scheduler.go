package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// SchedulerOptions configures StartScheduler.
type SchedulerOptions struct {
	// Kubeconfig is the scheduler's credentials (admin or least-privilege).
	Kubeconfig string
	// Profile is a KubeSchedulerConfiguration file, e.g. config/qgpu-scheduler.yaml
	// (relative paths are taken from the repository root).
	Profile string
	// Binary defaults to $QGPU_SCHEDULER_BIN, else bin/qgpu-scheduler.
	Binary string
	// LogPath receives stdout and stderr; empty: a file in os.TempDir().
	LogPath string
	// Args are extra flags, e.g. "--v=4".
	Args []string
}

// Scheduler is a running qgpu-scheduler subprocess: the real binary.
type Scheduler struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	LogPath string
}

// StartScheduler runs the real qgpu-scheduler binary with a profile.
func StartScheduler(ctx context.Context, o SchedulerOptions) (*Scheduler, error) {
	bin, err := binaryPath(o.Binary, "QGPU_SCHEDULER_BIN", "qgpu-scheduler")
	if err != nil {
		return nil, err
	}
	profile := o.Profile
	if !filepath.IsAbs(profile) {
		root, err := RepoRoot()
		if err != nil {
			return nil, err
		}
		profile = filepath.Join(root, profile)
	}
	if o.LogPath == "" {
		f, err := os.CreateTemp("", "qgpu-scheduler-*.log")
		if err != nil {
			return nil, err
		}
		f.Close()
		o.LogPath = f.Name()
	}
	log, err := os.OpenFile(o.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening scheduler log: %w", err)
	}
	args := append([]string{"--config=" + profile, "--kubeconfig=" + o.Kubeconfig, "--secure-port=0"}, o.Args...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that a killed test leaves no scheduler behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s := &Scheduler{cmd: cmd, done: make(chan struct{}), LogPath: o.LogPath}
	go func() {
		s.waitErr = cmd.Wait()
		log.Close()
		close(s.done)
	}()
	return s, nil
}

// Stop ends the scheduler with SIGTERM, then SIGKILL after 10 s.
func (s *Scheduler) Stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.Kill()
	}
}

// Kill ends the scheduler with SIGKILL, as a crash would, and waits for it.
func (s *Scheduler) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Exited reports whether the process has ended.
func (s *Scheduler) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// ExitErr is the process's wait error ("exit status 1", "signal: killed";
// nil for a clean exit) once it has ended, nil before.
func (s *Scheduler) ExitErr() error {
	if !s.Exited() {
		return nil
	}
	return s.waitErr
}
