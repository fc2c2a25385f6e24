package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrContainerNotFound is returned by ContainerDir when the pod's cgroup
// has no directory for the container (not started yet, or restarted).
var ErrContainerNotFound = errors.New("container cgroup not found")

// ContainerDir returns the cgroup directory of one container of a pod: the
// runtimes name it after the container ID, bare (cgroupfs driver) or as a
// systemd scope ("cri-containerd-<id>.scope", "crio-<id>.scope",
// "docker-<id>.scope"). containerID is the pod status's
// ("containerd://<id>") or a bare ID.
func (f *Freezer) ContainerDir(podDir, containerID string) (string, error) {
	id := containerID
	if i := strings.Index(id, "://"); i >= 0 {
		id = id[i+3:]
	}
	if id == "" || strings.Contains(id, "/") || strings.Contains(id, "..") {
		return "", fmt.Errorf("container ID %q: not a container ID", containerID)
	}
	entries, err := os.ReadDir(podDir)
	if err != nil {
		return "", fmt.Errorf("listing pod cgroup %s: %w", podDir, err)
	}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() && (n == id || strings.HasSuffix(n, "-"+id+".scope")) && !strings.Contains(n, "conmon") {
			return filepath.Join(podDir, n), nil
		}
	}
	return "", fmt.Errorf("%w: %s under %s", ErrContainerNotFound, id, podDir)
}

// FrozenUnder lists dir and every cgroup below it whose own freeze request
// stands (what a previous agent may have left), parents first.
func (f *Freezer) FrozenUnder(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking: nothing to thaw
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if frozen, err := f.Frozen(path); err == nil && frozen {
			out = append(out, path)
		}
		return nil
	})
	return out, err
}
