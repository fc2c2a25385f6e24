package cgroup

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/opencontainers/cgroups"
)

// podUIDPattern finds the pod UID in a cgroup path of either driver:
// ".../kubepods-burstable-pod1234_abcd_....slice/..." (systemd, underscores)
// or ".../kubepods/burstable/pod1234-abcd-.../..." (cgroupfs, dashes).
var podUIDPattern = regexp.MustCompile(`pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})`)

// PodUIDFromPath returns the pod UID in a cgroup path of either driver, or
// "" when the path is not a pod's.
func PodUIDFromPath(path string) string {
	if m := podUIDPattern.FindStringSubmatch(path); m != nil {
		return strings.ReplaceAll(m[1], "_", "-")
	}
	return ""
}

// podUIDIn returns the pod UID in any of a process's cgroup paths (by
// controller, as opencontainers/cgroups parses /proc/<pid>/cgroup), so v1,
// v2 and hybrid systems all work; controllers are looked at in order, so
// the answer does not depend on map order.
func podUIDIn(paths map[string]string) string {
	for _, controller := range slices.Sorted(maps.Keys(paths)) {
		if uid := PodUIDFromPath(paths[controller]); uid != "" {
			return uid
		}
	}
	return ""
}

// Procs maps processes to pods through a proc file system. NVML reports host
// PIDs, so in a container the agent needs hostPID for Root=/proc to resolve them.
type Procs struct {
	Root string // "/proc"
}

// PodUID returns the UID of the pod that pid belongs to ("" for none).
func (p Procs) PodUID(pid uint32) (string, error) {
	paths, err := cgroups.ParseCgroupFile(filepath.Join(p.Root, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return "", fmt.Errorf("reading the cgroup of pid %d: %w", pid, err)
	}
	return podUIDIn(paths), nil
}
