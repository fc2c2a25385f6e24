package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
)

// runFreezer puts a process into a cgroup of its own (the kubelet's part
// on a node) and freezes it with the agent's freezer (agent/cgroup, the
// priority controller's fallback suspension).
//
//	freezer create --root /sys/fs/cgroup --name N --pid P   prints `freezer version=v2 dir=D`
//	freezer freeze --root R --dir D --hold 5s               prints `freeze frozen_ms=.. settled_ms=.. thawed_ms=..`
//	freezer remove --root R --dir D                         thaws and removes the (empty) cgroup
func runFreezer(args []string, stdout io.Writer) (verdict, error) {
	if len(args) == 0 {
		return verdict{}, fmt.Errorf("%w: freezer create|freeze|remove [flags]", errUsage)
	}
	fs := flag.NewFlagSet("freezer "+args[0], flag.ContinueOnError)
	fs.SetOutput(stdout)
	root := fs.String("root", "/sys/fs/cgroup", "the cgroup mount")
	name := fs.String("name", "qgpu-gpucheck", "create: the cgroup's name under the hierarchy's root")
	pid := fs.Int("pid", 0, "create: the process moved into it")
	dir := fs.String("dir", "", "freeze, remove: the cgroup directory create printed")
	hold := fs.Duration("hold", 5*time.Second, "freeze: how long it stays frozen (a TERM or INT thaws it sooner)")
	if err := fs.Parse(args[1:]); err != nil {
		return verdict{}, err
	}
	f, err := cgroup.Detect(*root)
	if err != nil {
		return verdict{}, err
	}
	switch args[0] {
	case "create":
		d, err := createCgroup(f, *name, *pid)
		if err != nil {
			return verdict{}, err
		}
		fmt.Fprintf(stdout, "freezer version=%s dir=%s\n", f.Version, d)
		return verdict{}, nil
	case "freeze":
		return verdict{}, freezeFor(f, *dir, *hold, stdout)
	case "remove":
		return verdict{}, removeCgroup(f, *dir)
	}
	return verdict{}, fmt.Errorf("%w: freezer %q", errUsage, args[0])
}

// createCgroup makes <hierarchy>/<name> and moves pid into it.
func createCgroup(f *cgroup.Freezer, name string, pid int) (string, error) {
	if pid <= 0 || name == "" || strings.ContainsAny(name, "/.") {
		return "", fmt.Errorf("%w: create needs --pid and a plain --name", errUsage)
	}
	dir := filepath.Join(f.Root, name)
	if f.Version == cgroup.V1 {
		dir = filepath.Join(f.Root, "freezer", name)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return dir, fmt.Errorf("moving pid %d into %s: %w", pid, dir, err)
	}
	return dir, nil
}

// freezeFor freezes dir through the agent's Freezer, waits until the
// kernel reports it frozen, holds, and thaws (also on SIGTERM).
func freezeFor(f *cgroup.Freezer, dir string, hold time.Duration, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	frozen := nowMs()
	if err := f.Freeze(dir); err != nil {
		return err
	}
	defer f.Thaw(dir) // again, whatever happens below
	settled := int64(-1)
	deadline := time.Now().Add(hold)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if settled < 0 && kernelFrozen(f, dir) {
			settled = nowMs()
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := f.Thaw(dir); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "freeze frozen_ms=%d settled_ms=%d thawed_ms=%d ended_by_signal=%v\n", frozen, settled, nowMs(), ctx.Err() != nil)
	return nil
}

// kernelFrozen reads what the kernel says: v2 cgroup.events `frozen 1`, v1
// freezer.state FROZEN (not FREEZING, which the agent's Frozen counts).
func kernelFrozen(f *cgroup.Freezer, dir string) bool {
	if f.Version == cgroup.V1 {
		b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
		return err == nil && strings.TrimSpace(string(b)) == "FROZEN"
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	return err == nil && strings.Contains(string(b), "frozen 1")
}

func removeCgroup(f *cgroup.Freezer, dir string) error {
	if dir == "" {
		return fmt.Errorf("%w: remove needs --dir", errUsage)
	}
	_ = f.Thaw(dir)
	var err error
	for range 20 { // its processes may take a moment to be gone
		if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}
