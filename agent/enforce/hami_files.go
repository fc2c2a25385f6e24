package enforce

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
)

// HAMiLibName is the library's plain name; HAMi installs it as
// libvgpu.so.<version> (libvgpu.so.v2.9.0) as well.
const HAMiLibName = "libvgpu.so"

// FindHAMiLib returns the host path of the library in dir: name if given,
// else the newest libvgpu.so.<version>, else libvgpu.so. Versions compare
// by their numeric parts (v2.10.0 is newer than v2.9.1); a suffix that is
// not a version (libvgpu.so.bak) is ignored.
func FindHAMiLib(dir, name string) (string, error) {
	if name != "" {
		if strings.ContainsRune(name, '/') {
			return "", fmt.Errorf("%w: --hami-lib-name %q must be a file name, not a path", ErrHAMiConfig, name)
		}
		p := filepath.Join(dir, name)
		if !regular(p) {
			return "", fmt.Errorf("%w: %s is not a regular file (install HAMi-core on the node: docs/backend-hami-core.md)", ErrHAMiLibMissing, p)
		}
		return p, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v (install HAMi-core on the node: docs/backend-hami-core.md)", ErrHAMiLibMissing, dir, err)
	}
	var best string
	var bestVer []string
	for _, e := range entries {
		ver, ok := libVersion(e.Name())
		if !ok || !regular(filepath.Join(dir, e.Name())) {
			continue
		}
		if best == "" || compareVersions(ver, bestVer) > 0 || (compareVersions(ver, bestVer) == 0 && e.Name() > best) {
			best, bestVer = e.Name(), ver
		}
	}
	if best == "" {
		return "", fmt.Errorf("%w: no %s or %s.<version> regular file in %s (install HAMi-core on the node: docs/backend-hami-core.md)",
			ErrHAMiLibMissing, HAMiLibName, HAMiLibName, dir)
	}
	return filepath.Join(dir, best), nil
}

// libVersion splits libvgpu.so.<version> into its parts (none for the
// plain name); ok is false for other names.
func libVersion(name string) (parts []string, ok bool) {
	if name == HAMiLibName {
		return nil, true
	}
	v, found := strings.CutPrefix(name, HAMiLibName+".")
	v = strings.TrimPrefix(v, "v")
	if !found || v == "" || !unicode.IsDigit(rune(v[0])) {
		return nil, false
	}
	return strings.FieldsFunc(v, func(r rune) bool { return r == '.' || r == '-' || r == '_' }), true
}

// compareVersions compares part by part, numerically where both parts are
// numbers; a version that extends another is newer.
func compareVersions(a, b []string) int {
	for i := range min(len(a), len(b)) {
		x, errX := strconv.ParseUint(a[i], 10, 64)
		y, errY := strconv.ParseUint(b[i], 10, 64)
		switch {
		case errX == nil && errY == nil && x != y:
			if x < y {
				return -1
			}
			return 1
		case (errX != nil || errY != nil) && a[i] != b[i]:
			return strings.Compare(a[i], b[i])
		}
	}
	return len(a) - len(b)
}

func regular(path string) bool {
	fi, err := os.Stat(path) // follows a link: HAMi's installer may link the plain name
	return err == nil && fi.Mode().IsRegular()
}

// lockRoot makes the root of the cards' lock directories, 0755: no
// container mounts it (each gets its card's directory), so none can make,
// remove or replace another card's. An existing root keeps its mode: a
// container started before the per-card directories has the root at
// /tmp/vgpulock and may still create its lock file there.
func lockRoot(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

// sharedDir makes dir a directory every container user can write (the
// library creates its lock files there as the container's user), sticky
// like /tmp (as HAMi's current device plugin makes it): a container cannot
// remove or replace a lock file another container's user owns.
func sharedDir(dir string) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return os.Chmod(dir, 0o777|os.ModeSticky)
}

// writeFileIfChanged writes data through a temporary file and a rename, so a
// container starting meanwhile never reads a half-written file.
func writeFileIfChanged(path string, data []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
