package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// agent is the node agent (or a test device plugin) run as a child of the
// hollow node, so that it shares its mount namespace and sees the same
// /var/lib/kubelet/device-plugins.
type agent struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// agentEnv tells the agent which node it serves and where its state may go.
func agentEnv(o *options) []string {
	return append(os.Environ(),
		"NODE_NAME="+o.nodeName,
		"QGPU_NODE_NAME="+o.nodeName,
		"QGPU_HOLLOW_ROOT_DIR="+o.rootDir,
		"KUBECONFIG="+o.kubeconfig,
	)
}

// startAgent starts `agentCmd agentArgs...`. The command line is split on
// white space without shell quoting; pass arguments holding spaces with
// --agent-arg.
func startAgent(o *options) (*agent, error) {
	argv := append(strings.Fields(o.agentCmd), o.agentArgs...)
	if len(argv) == 0 {
		return nil, nil
	}
	logPath := filepath.Join(o.rootDir, "agent.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening agent log: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = agentEnv(o)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting agent %q: %w", argv[0], err)
	}
	a := &agent{cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		logFile.Close()
		klog.InfoS("Agent exited", "pid", cmd.Process.Pid, "err", err)
		close(a.done)
	}()
	klog.InfoS("Agent started", "pid", cmd.Process.Pid, "argv", argv, "log", logPath)
	return a, nil
}

// stop sends SIGTERM to the agent's process group and SIGKILL after grace.
func (a *agent) stop(grace time.Duration) {
	if a == nil {
		return
	}
	pgid := -a.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(grace):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-a.done
	}
}

// kill ends the agent's process group with SIGKILL and waits for it.
func (a *agent) kill() {
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
	<-a.done
}

// agentRunner starts the agent once, when the device manager is up.
type agentRunner struct {
	o    *options
	once sync.Once
	mu   sync.Mutex
	a    *agent
}

func (r *agentRunner) start() {
	r.once.Do(func() {
		a, err := startAgent(r.o)
		if err != nil {
			klog.ErrorS(err, "Agent not started")
			return
		}
		r.mu.Lock()
		r.a = a
		r.mu.Unlock()
	})
}

// restart kills the agent (SIGKILL, as a crash would: sockets and the store's
// lock are left behind) and starts it again, for SIGUSR1.
func (r *agentRunner) restart() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.a == nil {
		klog.InfoS("SIGUSR1 before the agent started: nothing to restart")
		return
	}
	r.a.kill()
	a, err := startAgent(r.o)
	if err != nil {
		klog.ErrorS(err, "Agent not restarted")
		return
	}
	r.a = a
}

func (r *agentRunner) stop(grace time.Duration) {
	r.mu.Lock()
	a := r.a
	r.mu.Unlock()
	a.stop(grace)
}
