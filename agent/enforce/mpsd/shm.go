package mpsd

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
)

// ShmMarker is the file the daemon leaves in the shared memory directory:
// a client that sees it at /dev/shm/ShmMarker shares the daemon's tmpfs
// (make e2e-node checks it from inside the clients).
const ShmMarker = "qgpu-mps-control-daemon"

// PrepareShm makes <root>/shm, the directory the daemon and every client
// mount at /dev/shm (MPS puts its shared memory there), sticky and writable
// by every user like /dev/shm, and checks that it is on a tmpfs: MPS
// shared memory on a disk would be slow and outlive a reboot.
func PrepareShm(root string) (string, error) {
	dir := filepath.Join(root, enforce.MPSShmDir)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", fmt.Errorf("creating the MPS shared memory directory: %w", err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		return "", err
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return "", fmt.Errorf("statfs %s: %w", dir, err)
	}
	if fs.Type != unix.TMPFS_MAGIC {
		return "", fmt.Errorf("--mps-root %q: %s is not on a tmpfs (file system type %#x): put --mps-root under /run or mount a tmpfs there", root, dir, fs.Type)
	}
	if err := os.WriteFile(filepath.Join(dir, ShmMarker), []byte("MPS shared memory of this node\n"), 0o644); err != nil {
		return "", err
	}
	return dir, nil
}
