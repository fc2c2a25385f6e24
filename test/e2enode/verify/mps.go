package verify

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// MPS checks what the mps backend gives a one-card shared container
// (docs/backend-mps.md): its card's pipe directory at /tmp/nvidia-mps (a
// read-only bind of <mps root>/<uuid>/pipe), its card's shared memory
// directory at /dev/shm (<mps root>/<uuid>/shm, which holds the control
// daemon's mark), writable, and CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
// as the slice says, whatever the pod's spec sets (the agent delivers
// through CDI).
func MPS(p *corev1.Pod, container string, lines []Line) []string {
	slices, err := containerSlices(p, container)
	if err != nil {
		return []string{err.Error()}
	}
	if len(slices) != 1 {
		return []string{fmt.Sprintf("%d cards: MPS serves one-card containers", len(slices))}
	}
	s := slices[0]
	mounts, files, writable := map[string]Line{}, map[string]string{}, map[string]bool{}
	for _, l := range lines {
		switch l.Kind {
		case "mount":
			mounts[l.Target] = l
		case "file":
			files[l.Name] = l.Value
		case "writable":
			writable[l.Name] = true
		}
	}
	var problems []string
	for target, root := range map[string]string{"/tmp/nvidia-mps": "/" + s.UUID + "/pipe", "/dev/shm": "/" + s.UUID + "/shm"} {
		m, ok := mounts[target]
		readOnly := target == "/tmp/nvidia-mps" // a root tenant could remove the control socket
		switch {
		case !ok:
			problems = append(problems, "no mount at "+target)
		case m.RO && !readOnly:
			problems = append(problems, target+" mounted read-only")
		case !m.RO && readOnly:
			problems = append(problems, target+" mounted read-write")
		case !strings.HasSuffix(m.Root, root):
			problems = append(problems, fmt.Sprintf("%s is %s, want the MPS root's %s", target, m.Root, root))
		}
	}
	if !writable["/dev/shm"] {
		problems = append(problems, "/dev/shm is not writable by the container's user")
	}
	if _, ok := files["/dev/shm/qgpu-mps-control-daemon"]; !ok {
		problems = append(problems, "/dev/shm does not hold the MPS control daemon's mark: not the daemon's shared memory")
	}
	return append(problems, Env(lines, map[string]string{
		"CUDA_MPS_PIPE_DIRECTORY":          "/tmp/nvidia-mps",
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=" + strconv.FormatInt(s.MemoryGiB*protocol.GiB, 10) + "M",
	})...)
}

// Env checks that the container's environment holds want.
func Env(lines []Line, want map[string]string) []string {
	env := map[string]string{}
	for _, l := range lines {
		if l.Kind == "env" {
			env[l.Name] = l.Value
		}
	}
	var problems []string
	for k, v := range want {
		if got, ok := env[k]; !ok || got != v {
			problems = append(problems, fmt.Sprintf("%s=%q, want %q", k, got, v))
		}
	}
	return problems
}

// Backend tells the backend that answered a plain pod by its variables:
// the memory answer's and the core answer's must agree (the kubelet makes
// one Allocate per resource, and the label may change between the two).
func Backend(lines []Line) string {
	env := map[string]bool{}
	for _, l := range lines {
		if l.Kind == "env" {
			env[l.Name] = true
		}
	}
	memory, core := "env", "env"
	switch {
	case env["CUDA_MPS_PIPE_DIRECTORY"]:
		memory = "mps"
	case env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]:
		memory = "hami-core"
	}
	switch {
	case env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]:
		core = "mps"
	case env["GPU_CORE_UTILIZATION_POLICY"]:
		core = "hami-core"
	}
	if memory != core {
		return fmt.Sprintf("%s (memory) and %s (cores)", memory, core)
	}
	return memory
}

// MPSCeiling checks the daemon-side ceiling the control daemon marked in
// force on the container's card (applied: <mps root>/<uuid>/ceiling.applied
// as read on the node) for a container alone on its card: exactly its
// slice, the memory in MiB and its cores as the thread percentage (policy
// fixed-share). A client that drops its CUDA_MPS_* variables gets this
// ceiling from a real MPS server; what a client really gets needs a real
// card (docs/real-node.md).
func MPSCeiling(p *corev1.Pod, container, applied string) []string {
	slices, err := containerSlices(p, container)
	if err != nil {
		return []string{err.Error()}
	}
	if len(slices) != 1 {
		return []string{fmt.Sprintf("%d cards: MPS serves one-card containers", len(slices))}
	}
	got, err := enforce.ParseMPSCeiling(applied)
	if err != nil {
		return []string{fmt.Sprintf("the MPS ceiling in force on %s: %v", slices[0].UUID, err)}
	}
	want := enforce.MPSCeiling{MemoryMiB: slices[0].MemoryGiB * protocol.GiB, ThreadPercentage: slices[0].Cores}
	if got != want {
		return []string{fmt.Sprintf("the MPS ceiling in force on %s is %s, want the container's slice %s",
			slices[0].UUID, strings.TrimSpace(got.String()), strings.TrimSpace(want.String()))}
	}
	return nil
}
