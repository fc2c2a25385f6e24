package verify

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func hamiGood() []Line {
	return []Line{
		{Kind: "mount", Target: "/usr/local/vgpu/libvgpu.so", RO: true},
		{Kind: "mount", Target: "/etc/ld.so.preload", RO: true},
		{Kind: "mount", Target: "/tmp/vgpu"},
		{Kind: "mount", Target: "/tmp/vgpulock", Root: "/vgpulock/GPU-b"},
		{Kind: "file", Name: "/etc/ld.so.preload", Value: "/usr/local/vgpu/libvgpu.so\n"},
		{Kind: "writable", Name: "/tmp/vgpu"},
		{Kind: "writable", Name: "/tmp/vgpulock"},
		{Kind: "env", Name: "CUDA_DEVICE_MEMORY_SHARED_CACHE", Value: "/tmp/vgpu/cudevshr.cache"},
		{Kind: "env", Name: "CUDA_DEVICE_MEMORY_LIMIT_0", Value: "4096m"},
		{Kind: "mount", Target: "/overrideEnv", RO: true},
	}
}

func TestHAMiCore(t *testing.T) {
	overriding := func(t *testing.T) *corev1.Pod {
		p := pod(t)
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "CUDA_DEVICE_MEMORY_LIMIT_0", Value: "80g"}, {Name: "LD_PRELOAD", Value: ""}}
		return p
	}
	for _, tc := range []struct {
		name   string
		pod    func(*testing.T) *corev1.Pod
		change func([]Line) []Line
		want   string // a problem containing this; "" for none
		cdi    bool   // the agent delivered through CDI
	}{
		{"as set up", pod, func(l []Line) []Line { return l }, "", false},
		{"no library", pod, func(l []Line) []Line { return l[1:] }, "no mount at /usr/local/vgpu/libvgpu.so", false},
		{"no empty /overrideEnv over the image's", pod, func(l []Line) []Line { return l[:len(l)-1] }, "no mount at /overrideEnv", false},
		{"preload writable", pod, func(l []Line) []Line { l[1].RO = false; return l }, "/etc/ld.so.preload mounted read-only=false", false},
		{"preload names something else", pod, func(l []Line) []Line { l[4].Value = ""; return l }, `/etc/ld.so.preload holds ""`, false},
		{"region dir read-only", pod, func(l []Line) []Line { l[2].RO = true; return l }, "/tmp/vgpu mounted read-only=true", false},
		{"region dir not writable", pod, func(l []Line) []Line { return append(l[:5], l[6:]...) }, "/tmp/vgpu is not writable", false},
		{"no lock dir", pod, func(l []Line) []Line { return append(l[:3], l[4:]...) }, "no mount at /tmp/vgpulock", false},
		{"the node-wide lock dir", pod, func(l []Line) []Line { l[3].Root = "/vgpulock"; return l }, "/tmp/vgpulock is /vgpulock, want its first card's", false},
		{"no shared cache", pod, func(l []Line) []Line { return l[:7] }, "CUDA_DEVICE_MEMORY_SHARED_CACHE", false},
		{"wrong limit", pod, func(l []Line) []Line { l[8].Value = "8192m"; return l }, "CUDA_DEVICE_MEMORY_LIMIT_0", false},
		// The pod's own limit wins (cooperative), but the preload stays.
		{"overriding pod, preload kept", overriding, func(l []Line) []Line { l[8].Value = "80g"; return l }, "", false},
		{"overriding pod, preload gone", overriding, func(l []Line) []Line { l[8].Value = "80g"; return append(l[:1], l[2:]...) }, "no mount at /etc/ld.so.preload", false},
		// Through CDI the agent's limit must win over the pod's.
		{"overriding pod, CDI, agent's limit", overriding, func(l []Line) []Line { return l }, "", true},
		{"overriding pod, CDI, pod's limit", overriding, func(l []Line) []Line { l[8].Value = "80g"; return l }, "CUDA_DEVICE_MEMORY_LIMIT_0", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := HAMiCore(tc.pod(t), "main", tc.change(hamiGood()), tc.cdi)
			got := strings.Join(problems, "; ")
			if tc.want == "" && len(problems) > 0 || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("problems %q, want one with %q", got, tc.want)
			}
		})
	}
}
