package hamiregion

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// FileName is the name of a container's region file inside its directory:
// the agent sets CUDA_DEVICE_MEMORY_SHARED_CACHE to it (the basename the
// library uses when the variable is unset), and the priority controller and
// the hami-core upkeep (agent/hamicore) read it back from the host.
const FileName = "cudevshr.cache"

// ContainerDir returns the host directory of one container's region:
// <root>/<pod UID>_<container>, the layout HAMi's device plugin uses. It
// refuses names that would leave root or make the name ambiguous (a pod UID
// is a UUID and a container name a DNS label: neither holds '_' or '/').
func ContainerDir(root, podUID, container string) (string, error) {
	if err := checkName("pod UID", podUID); err != nil {
		return "", err
	}
	if err := checkName("container name", container); err != nil {
		return "", err
	}
	return filepath.Join(root, podUID+"_"+container), nil
}

// RegionPath returns the host path of one container's region file.
func RegionPath(root, podUID, container string) (string, error) {
	dir, err := ContainerDir(root, podUID, container)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, FileName), nil
}

// ParseContainerDir splits a directory name made by ContainerDir; ok is
// false for anything else (the region root also holds the agent's own files).
func ParseContainerDir(name string) (podUID, container string, ok bool) {
	podUID, container, found := strings.Cut(name, "_")
	if !found || checkName("pod UID", podUID) != nil || checkName("container name", container) != nil {
		return "", "", false
	}
	return podUID, container, true
}

func checkName(field, v string) error {
	if v == "" || v == "." || v == ".." || strings.ContainsAny(v, "_/\x00") {
		return fmt.Errorf("hami region directory: %s %q must be non-empty and hold no '_' or '/'", field, v)
	}
	return nil
}

// PrepareContainerDir creates one container's region directory (and root)
// and returns it. The directory is mode 0777: the library creates the
// region file in it as the container's user, which the agent cannot know
// at Allocate (the image's USER, runAsUser), and a non-root container that
// cannot create its region exits at its first CUDA call. Only that
// container sees the directory; root itself stays 0755. An existing
// directory is kept, region and all: a re-issued Allocate or a restarted
// container must find the region its running processes share.
func PrepareContainerDir(root, podUID, container string) (string, error) {
	dir, err := ContainerDir(root, podUID, container)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("creating hami region root: %w", err)
	}
	if err := os.Mkdir(dir, 0o777); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("creating hami region directory: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("hami region directory %s is not a directory", dir)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // Mkdir's mode went through the umask
		return "", fmt.Errorf("hami region directory: %w", err)
	}
	return dir, nil
}
