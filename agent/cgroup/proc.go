package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// podUIDPattern finds the pod UID in a cgroup path of either driver:
// ".../kubepods-burstable-pod1234_abcd_....slice/..." (systemd, underscores)
// or ".../kubepods/burstable/pod1234-abcd-.../..." (cgroupfs, dashes).
var podUIDPattern = regexp.MustCompile(`pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})`)

// PodUIDFromCgroupFile returns the pod UID in the contents of a
// /proc/<pid>/cgroup file, or "" when the process is not in a pod. Every line
// ("hierarchy-ID:controllers:path") is looked at, so v1, v2 and hybrid
// systems all work.
func PodUIDFromCgroupFile(content string) string {
	for _, line := range strings.Split(content, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if m := podUIDPattern.FindStringSubmatch(parts[2]); m != nil {
			return strings.ReplaceAll(m[1], "_", "-")
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
	data, err := os.ReadFile(filepath.Join(p.Root, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return "", fmt.Errorf("reading the cgroup of pid %d: %w", pid, err)
	}
	return PodUIDFromCgroupFile(string(data)), nil
}
