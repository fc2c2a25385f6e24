package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	for _, rel := range PodDirCandidates(uid) {
		systemd := strings.HasPrefix(rel, "kubepods.slice")
		depth := strings.Count(rel, string(filepath.Separator))
		if systemd == t.Systemd && (qos == "") == (depth == 1) && strings.Contains(rel, qos) {
			return rel
		}
	}
	panic(fmt.Sprintf("no layout for qos %q", qos))
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
	dir := t.PodDir(qos, uid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	file, value := "cgroup.freeze", "0"
	if t.Version == V1 {
		file, value = "freezer.state", "THAWED"
	}
	return dir, os.WriteFile(filepath.Join(dir, file), []byte(value+"\n"), 0o644)
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
