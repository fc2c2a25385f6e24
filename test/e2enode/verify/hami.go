package verify

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// HAMiCore checks what the hami-core backend gives a container
// (docs/backend-hami-core.md), on top of Container: the library and
// /etc/ld.so.preload and an empty /overrideEnv mounted read-only, the preload file naming the
// library, the region and lock directories mounted writable and writable
// by the container's user, and CUDA_DEVICE_MEMORY_SHARED_CACHE and
// CUDA_DEVICE_MEMORY_LIMIT_<i> as the slices say. What the node enforces
// is checked whatever the pod's spec says. A limit variable the pod sets
// itself is checked only when envByCDI (the agent delivered through CDI,
// whose variables the runtime applies after the pod's own); otherwise the
// pod's env comes last and that part is cooperative.
func HAMiCore(p *corev1.Pod, container string, lines []Line, envByCDI bool) []string {
	mounts, env, files, writable := map[string]Line{}, map[string]string{}, map[string]string{}, map[string]bool{}
	var problems []string
	for _, l := range lines {
		switch l.Kind {
		case "mount":
			mounts[l.Target] = l
		case "env":
			env[l.Name] = l.Value
		case "file":
			files[l.Name] = l.Value
		case "writable":
			writable[l.Name] = true
		}
	}
	for target, ro := range map[string]bool{"/usr/local/vgpu/libvgpu.so": true, "/etc/ld.so.preload": true,
		"/tmp/vgpu": false, "/tmp/vgpulock": false, "/overrideEnv": true} {
		m, ok := mounts[target]
		switch {
		case !ok:
			problems = append(problems, "no mount at "+target)
		case m.RO != ro:
			problems = append(problems, fmt.Sprintf("%s mounted read-only=%v, want %v", target, m.RO, ro))
		case !ro && !writable[target]:
			problems = append(problems, target+" is not writable by the container's user")
		}
	}
	if got := files["/etc/ld.so.preload"]; got != "/usr/local/vgpu/libvgpu.so\n" {
		problems = append(problems, fmt.Sprintf("/etc/ld.so.preload holds %q", got))
	}
	want := map[string]string{"CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/vgpu/cudevshr.cache"}
	slices, err := containerSlices(p, container)
	if err != nil {
		return append(problems, err.Error())
	}
	for i, s := range slices {
		want["CUDA_DEVICE_MEMORY_LIMIT_"+strconv.Itoa(i)] = strconv.FormatInt(s.MemoryGiB*protocol.GiB, 10) + "m"
	}
	// The lock directory is the first card's (the lowest index), not the node's.
	if m, ok := mounts["/tmp/vgpulock"]; ok && len(slices) > 0 {
		first := slices[0]
		for _, s := range slices[1:] {
			if s.Index < first.Index {
				first = s
			}
		}
		if !strings.HasSuffix(m.Root, "/"+first.UUID) {
			problems = append(problems, fmt.Sprintf("/tmp/vgpulock is %s, want its first card's directory .../%s", m.Root, first.UUID))
		}
	}
	own := specEnv(p, container)
	for k, v := range want {
		if _, set := own[k]; (envByCDI || !set) && env[k] != v {
			problems = append(problems, fmt.Sprintf("%s=%q, want %q", k, env[k], v))
		}
	}
	return problems
}

func containerSlices(p *corev1.Pod, container string) ([]protocol.Slice, error) {
	raw := p.Annotations[protocol.AnnotationAssignment]
	a, err := protocol.DecodeAssignment([]byte(raw))
	if err != nil {
		return nil, fmt.Errorf("assignment annotation %q: %v", raw, err)
	}
	for _, c := range a.Containers {
		if c.Name == container {
			return c.Slices, nil
		}
	}
	return nil, fmt.Errorf("no slices for the container in the assignment %s", raw)
}

// specEnv is the variables the pod's spec sets for the container.
func specEnv(p *corev1.Pod, container string) map[string]bool {
	out := map[string]bool{}
	for _, c := range p.Spec.Containers {
		if c.Name == container {
			for _, e := range c.Env {
				out[e.Name] = true
			}
		}
	}
	return out
}
