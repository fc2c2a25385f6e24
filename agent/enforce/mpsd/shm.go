package mpsd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
)

// ShmMarker is the file the daemon leaves in each card's shared memory
// directory: a client that sees it at /dev/shm/ShmMarker shares the
// daemon's tmpfs (make e2e-node checks it from inside the clients).
const ShmMarker = "qgpu-mps-control-daemon"

// PrepareShm checks that root, under which every card's shared memory
// directory is made (<root>/<uuid>/shm), is on a tmpfs: MPS shared memory
// on a disk would be slow and outlive a reboot. It returns root.
func PrepareShm(root string) (string, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("creating --mps-root: %w", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err != nil {
		return "", fmt.Errorf("statfs %s: %w", root, err)
	}
	if fs.Type != unix.TMPFS_MAGIC {
		return "", fmt.Errorf("--mps-root %q is not on a tmpfs (file system type %#x): put --mps-root under /run or mount a tmpfs there", root, fs.Type)
	}
	return root, nil
}

// prepareCardShm makes <card>/shm, the directory the card's daemon (and so
// its server) and the card's clients have at /dev/shm, sticky and writable
// by every user like /dev/shm, with the mark in it. One per card: MPS
// needs its server and clients to share /dev/shm, and nothing more, so
// tenants of other cards do not see each other's shared memory.
func prepareCardShm(card string) (string, error) {
	dir := filepath.Join(card, enforce.MPSShmDir)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", fmt.Errorf("creating the card's MPS shared memory directory: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ShmMarker), []byte("MPS shared memory of this card\n"), 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// Isolate builds the command that runs argv (nvidia-cuda-mps-control and
// its arguments) with shm, the card's shared memory directory, at
// /dev/shm. Daemons.Isolate nil runs argv as it is (tests, and a daemon
// pod whose own /dev/shm is the one directory).
type Isolate func(ctx context.Context, shm string, argv []string) *exec.Cmd

// ShmExecCommand is the hidden subcommand of self (qgpu-agent) that
// ShmNamespace runs: mps-shm-exec <shm> <program> [args...].
const ShmExecCommand = "mps-shm-exec"

// ShmNamespace runs argv through `self mps-shm-exec <shm> argv...` in a
// mount namespace of its own (CLONE_NEWNS; Go makes its mounts private),
// where ExecWithShm binds shm on /dev/shm and becomes argv: the card's
// control daemon, and the servers it forks, see only the card's shared
// memory. Needs CAP_SYS_ADMIN and no AppArmor profile that denies mount
// (manifests/mps/daemonset.yaml).
func ShmNamespace(self string) Isolate {
	return func(ctx context.Context, shm string, argv []string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, self, append([]string{ShmExecCommand, shm}, argv...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		return cmd
	}
}

// ExecWithShm is mps-shm-exec: in the mount namespace its parent made for
// it, bind shm on /dev/shm and execute argv (its PID stays: the daemon's
// PID file names the control daemon). It refuses to run in its parent's
// mount namespace, where the bind would cover the /dev/shm of every
// process of the pod.
func ExecWithShm(shm string, argv []string) error {
	return execWithShm(shm, argv, sysShm{})
}

// shmSys is what ExecWithShm needs of the system, faked in tests.
type shmSys interface {
	Readlink(path string) (string, error)
	Mount(source, target string) error
	LookPath(file string) (string, error)
	Exec(path string, argv, env []string) error
}

type sysShm struct{}

func (sysShm) Readlink(path string) (string, error) { return os.Readlink(path) }
func (sysShm) Mount(source, target string) error {
	return unix.Mount(source, target, "", unix.MS_BIND, "")
}
func (sysShm) LookPath(file string) (string, error)       { return exec.LookPath(file) }
func (sysShm) Exec(path string, argv, env []string) error { return unix.Exec(path, argv, env) }

// errSameNamespace: mps-shm-exec was not started in a mount namespace of its own.
var errSameNamespace = errors.New("mps-shm-exec runs in its parent's mount namespace: it is started only by the MPS control daemon, in a namespace of its own")

func execWithShm(shm string, argv []string, sys shmSys) error {
	if len(argv) == 0 || !filepath.IsAbs(shm) {
		return fmt.Errorf("usage: %s <absolute shm dir> <program> [args...]", ShmExecCommand)
	}
	self, err := sys.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("reading this process's mount namespace: %w", err)
	}
	parent, err := sys.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err != nil {
		return fmt.Errorf("reading the parent's mount namespace: %w", err)
	}
	if self == parent {
		return errSameNamespace
	}
	if err := sys.Mount(shm, "/dev/shm"); err != nil {
		return fmt.Errorf("binding %s on /dev/shm: %w (the MPS control daemon's container needs CAP_SYS_ADMIN and no AppArmor profile that denies mount: manifests/mps/daemonset.yaml)", shm, err)
	}
	path, err := sys.LookPath(argv[0])
	if err != nil {
		return err
	}
	return sys.Exec(path, argv, os.Environ())
}
