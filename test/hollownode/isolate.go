package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// isolatedEnv marks the re-executed child that already runs in its own
// mount namespace.
const isolatedEnv = "QGPU_HOLLOW_NODE_ISOLATED"

// runIsolated re-executes this program in a new mount namespace and relays
// signals to it. The kubelet device manager hard-codes
// /var/lib/kubelet/device-plugins/kubelet.sock, so each hollow node (and the
// agent it starts) needs a /var/lib of its own to run beside others.
func runIsolated() (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 1, fmt.Errorf("finding own executable: %w", err)
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), isolatedEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS,
		// The node must not outlive this process, whoever kills it.
		Pdeathsig: syscall.SIGKILL,
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("starting isolated child (needs root for CLONE_NEWNS): %w", err)
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return exitErr.ExitCode(), nil
	}
	if err != nil {
		return 1, fmt.Errorf("waiting for isolated child: %w", err)
	}
	return 0, nil
}

// setupMounts runs inside the new namespace: it stops mount propagation to
// the host, then hides the host's /var/lib under a tmpfs.
func setupMounts(rootDir string) error {
	abs, err := filepath.Abs(rootDir)
	if err != nil {
		return fmt.Errorf("resolving root dir: %w", err)
	}
	if abs == "/var/lib" || strings.HasPrefix(abs, "/var/lib/") {
		return fmt.Errorf("--root-dir %s is under /var/lib, which isolation replaces with a tmpfs", abs)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / recursively private: %w", err)
	}
	if err := syscall.Mount("tmpfs", "/var/lib", "tmpfs", 0, "mode=0755,size=64m"); err != nil {
		return fmt.Errorf("mounting tmpfs on /var/lib: %w", err)
	}
	return nil
}
