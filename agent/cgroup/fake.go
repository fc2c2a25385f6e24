package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// FakeTree builds a directory tree that mimics a cgroup mount and /proc, so
// that tests and simulations exercise the same paths as a node: the pod
// directories of either kubelet driver, their freeze files, and
// /proc/<pid>/cgroup files pointing into them.
type FakeTree struct {
	CgroupRoot string
	ProcRoot   string
	Version    Version
	Systemd    bool
	// Kubelet's CgroupRoot is honoured (its Driver is Systemd's).
	Kubelet Kubelet
}

// NewFakeTree creates the roots under dir: dir/cgroup and dir/proc.
func NewFakeTree(dir string, v Version, systemd bool) (*FakeTree, error) {
	return NewFakeTreeAt(filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc"), v, systemd)
}

// NewFakeTreeAt creates (or reopens) a tree with the given roots.
func NewFakeTreeAt(cgroupRoot, procRoot string, v Version, systemd bool) (*FakeTree, error) {
	t := &FakeTree{CgroupRoot: cgroupRoot, ProcRoot: procRoot, Version: v, Systemd: systemd}
	marker := filepath.Join(t.CgroupRoot, "cgroup.controllers")
	if v == V1 {
		marker = filepath.Join(t.CgroupRoot, "freezer", "freezer.state")
	}
	if err := os.MkdirAll(filepath.Dir(marker), 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(t.ProcRoot, 0o755); err != nil {
		return nil, err
	}
	return t, os.WriteFile(marker, []byte("cpu memory pids\n"), 0o644)
}

// relPodDir is the pod's directory relative to the hierarchy, as the kubelet
// of this tree's driver would name it.
func (t *FakeTree) relPodDir(qos, uid string) string {
	if qos != "" && qos != "burstable" && qos != "besteffort" {
		panic(fmt.Sprintf("no layout for qos %q", qos))
	}
	p, err := t.Kubelet.podPath(qos, uid, t.Systemd)
	if err != nil {
		panic(err)
	}
	return p
}

func (t *FakeTree) hierarchy() string {
	if t.Version == V1 {
		return filepath.Join(t.CgroupRoot, "freezer")
	}
	return t.CgroupRoot
}

// AddPod creates the pod's cgroup directory (thawed) and returns it. qos is
// "" (Guaranteed), "burstable" or "besteffort".
func (t *FakeTree) AddPod(qos, uid string) (string, error) {
	return t.mkCgroup(t.PodDir(qos, uid))
}

// AddContainer creates a container's cgroup under its pod's (thawed), named
// as containerd names it for the tree's driver, and returns it.
func (t *FakeTree) AddContainer(qos, uid, containerID string) (string, error) {
	name := containerID
	if t.Systemd {
		name = "cri-containerd-" + containerID + ".scope"
	}
	return t.mkCgroup(filepath.Join(t.PodDir(qos, uid), name))
}

func (t *FakeTree) mkCgroup(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	file, value := "cgroup.freeze", "0"
	if t.Version == V1 {
		file, value = "freezer.state", "THAWED"
	}
	return dir, os.WriteFile(filepath.Join(dir, file), []byte(value+"\n"), 0o644)
}

// ErrFrozenTasks is KillPod's answer on cgroup v1 while a cgroup of the pod
// is frozen: there a SIGKILL is not delivered until the task is thawed, so
// the kubelet's kill (and the pod's deletion) would hang.
var ErrFrozenTasks = errors.New("v1 freezer: frozen tasks cannot be killed until thawed")

// KillPod is the kubelet killing the pod's containers and removing its
// cgroup. On v2 a fatal signal reaches frozen tasks, so it always completes;
// on v1 it fails with ErrFrozenTasks while anything under the pod is frozen.
func (t *FakeTree) KillPod(qos, uid string) error {
	dir := t.PodDir(qos, uid)
	if t.Version == V1 {
		f := &Freezer{Root: t.CgroupRoot, Version: V1}
		frozen, err := f.FrozenUnder(dir)
		if err != nil {
			return err
		}
		if len(frozen) > 0 {
			return fmt.Errorf("%w: %v", ErrFrozenTasks, frozen)
		}
	}
	return os.RemoveAll(dir)
}

// PodDir is where AddPod puts the pod's directory.
func (t *FakeTree) PodDir(qos, uid string) string {
	return filepath.Join(t.hierarchy(), t.relPodDir(qos, uid))
}

// RemovePod removes the pod's directory (the kubelet deleted the pod).
func (t *FakeTree) RemovePod(qos, uid string) error { return os.RemoveAll(t.PodDir(qos, uid)) }

// RemoveProc removes /proc/<pid> (the process exited).
func (t *FakeTree) RemoveProc(pid uint32) error {
	return os.RemoveAll(filepath.Join(t.ProcRoot, strconv.FormatUint(uint64(pid), 10)))
}

// AddProc writes /proc/<pid>/cgroup for a container process of the pod.
func (t *FakeTree) AddProc(pid uint32, qos, uid string) error {
	path := "/" + filepath.ToSlash(t.relPodDir(qos, uid)) + "/cri-containerd-0123abcd.scope"
	content := "0::" + path + "\n"
	if t.Version == V1 {
		content = "12:freezer:" + path + "\n11:memory:" + path + "\n1:name=systemd:" + path + "\n"
	}
	dir := filepath.Join(t.ProcRoot, strconv.FormatUint(uint64(pid), 10))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cgroup"), []byte(content), 0o644)
}
