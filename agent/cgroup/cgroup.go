// Package cgroup freezes and thaws pods through the cgroup freezer (v1
// freezer.state, v2 cgroup.freeze), finds a pod's cgroup directory in the
// kubelet's layouts (systemd and cgroupfs drivers), and maps a process to its
// pod through /proc/<pid>/cgroup. Roots are parameters so tests run on a
// temporary tree that mimics /sys/fs/cgroup and /proc.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Version is the cgroup hierarchy the freezer lives in.
type Version int

// The hierarchies.
const (
	V1 Version = 1
	V2 Version = 2
)

func (v Version) String() string { return fmt.Sprintf("v%d", int(v)) }

// ErrNoFreezer is returned by Detect when root has neither a v2 unified
// hierarchy nor a v1 freezer hierarchy.
var ErrNoFreezer = errors.New("no cgroup freezer")

// ErrPodNotFound is returned by PodDir when no layout has the pod's directory.
var ErrPodNotFound = errors.New("pod cgroup not found")

// QoS classes as the kubelet names their cgroups; "" is Guaranteed, whose pods
// sit directly under kubepods.
var qosClasses = []string{"", "burstable", "besteffort"}

// Freezer freezes pod cgroups under one root.
type Freezer struct {
	// Root is the cgroup mount root (/sys/fs/cgroup); for v1 the freezer
	// hierarchy is Root/freezer.
	Root    string
	Version Version
	// Kubelet says where pod cgroups are (zero: the default root, both drivers).
	Kubelet Kubelet
}

// Detect returns a Freezer for root: v2 when root/cgroup.controllers exists
// (the unified hierarchy; its freezer is built into every non-root cgroup),
// else v1 when root/freezer exists (v1 and hybrid systems).
//
// Not opencontainers/cgroups' IsCgroup2UnifiedMode (utils.go:34 of
// v0.0.1): it statfs-es the fixed /sys/fs/cgroup once per process
// (sync.Once), so it can follow neither the agent's --cgroup-root (the
// host's mount seen from the agent's container) nor the scratch trees of
// the tests, the simulated agent and the playground. On a real mount the
// two agree: only a unified mount has cgroup.controllers at its root.
func Detect(root string) (*Freezer, error) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return &Freezer{Root: root, Version: V2}, nil
	}
	if fi, err := os.Stat(filepath.Join(root, "freezer")); err == nil && fi.IsDir() {
		return &Freezer{Root: root, Version: V1}, nil
	}
	return nil, fmt.Errorf("%w under %s: neither cgroup.controllers (v2) nor freezer/ (v1)", ErrNoFreezer, root)
}

// hierarchy is the directory the pod layouts are relative to.
func (f *Freezer) hierarchy() string {
	if f.Version == V1 {
		return filepath.Join(f.Root, "freezer")
	}
	return f.Root
}

// PodDirCandidates lists, relative to the hierarchy, where a kubelet with
// the default cgroup root puts a pod's cgroup: systemd driver first, then
// cgroupfs, for each QoS class.
func PodDirCandidates(uid string) []string { return Kubelet{}.PodDirCandidates(uid) }

// PodDir returns the absolute cgroup directory of the pod with uid.
func (f *Freezer) PodDir(uid string) (string, error) {
	base := f.hierarchy()
	for _, rel := range f.Kubelet.PodDirCandidates(uid) {
		dir := filepath.Join(base, rel)
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: pod %s under %s", ErrPodNotFound, uid, base)
}

// Freeze stops every process of the cgroup dir (and its children). The
// kernel completes the freeze asynchronously; Freeze returns once the
// request is written.
//
// The writes are ours, not opencontainers/cgroups' freezers, which wait
// for the kernel: v1's FreezerGroup.Set (fs/freezer.go:25) rewrites
// FROZEN up to 1000 times until freezer.state reads FROZEN, thawing back
// and failing if it stays FREEZING; v2's setFreezer (fs2/freezer.go:16)
// polls cgroup.events every 10 ms for up to 10 s. The priority controller
// freezes from its loop and must not stall there (it sees the state on its
// next pass); where v1 stays FREEZING, Set thaws the cgroup and fails,
// where this leaves the request standing for that pass to see. Their file access (cgroups.OpenFile, file.go:23) also refuses
// files off cgroupfs unless the package-global TestMode is set, which the
// simulated agent's scratch trees would need in a shipped code path.
func (f *Freezer) Freeze(dir string) error { return f.write(dir, true) }

// Thaw resumes the cgroup dir.
func (f *Freezer) Thaw(dir string) error { return f.write(dir, false) }

func (f *Freezer) write(dir string, frozen bool) error {
	file, value := "cgroup.freeze", "0"
	if f.Version == V1 {
		file, value = "freezer.state", "THAWED"
		if frozen {
			value = "FROZEN"
		}
	} else if frozen {
		value = "1"
	}
	// O_WRONLY without O_CREATE: a vanished cgroup must fail, not grow a file.
	fh, err := os.OpenFile(filepath.Join(dir, file), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	_, err = fh.WriteString(value)
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s=%s in %s: %w", file, value, dir, err)
	}
	return nil
}

// Frozen reports whether the cgroup dir is frozen or being frozen (v1
// FREEZING counts: the request stands).
func (f *Freezer) Frozen(dir string) (bool, error) {
	if f.Version == V1 {
		data, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
		if err != nil {
			return false, err
		}
		s := strings.TrimSpace(string(data))
		return s == "FROZEN" || s == "FREEZING", nil
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.freeze"))
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(data)) == "1", nil
}
