package hamicore

import (
	"os"
	"path"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// seesHostPIDs reports whether the agent of a DaemonSet finds a host PID
// under its --proc-root (default /proc), as Config.ProcRoot needs: either
// it shares the host's PID namespace and reads its own /proc, or the
// host's /proc is mounted at --proc-root.
func seesHostPIDs(spec corev1.PodSpec) bool {
	for _, c := range spec.Containers {
		if c.Name != "qgpu-agent" {
			continue
		}
		root := "/proc"
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--proc-root="); ok {
				root = path.Clean(v)
			}
		}
		if root == "/proc" {
			return spec.HostPID
		}
		for _, m := range c.VolumeMounts {
			if path.Clean(m.MountPath) != root {
				continue
			}
			for _, v := range spec.Volumes {
				if v.Name == m.Name && v.HostPath != nil && path.Clean(v.HostPath.Path) == "/proc" {
					return true
				}
			}
		}
	}
	return false
}

// TestAgentSeesHostPIDs: the burst-share upkeep tells live regions by
// /proc/<host pid>, so the shipped base agent must see the host's PIDs
// (it did only in the colocation overlay, which adds hostPID).
func TestAgentSeesHostPIDs(t *testing.T) {
	raw, err := os.ReadFile("../../manifests/agent/daemonset/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(raw, &ds); err != nil {
		t.Fatal(err)
	}
	agent := func(args []string, mounts ...corev1.VolumeMount) corev1.PodSpec {
		return corev1.PodSpec{Containers: []corev1.Container{{Name: "qgpu-agent", Args: args, VolumeMounts: mounts}}}
	}
	hostProc := func(s corev1.PodSpec, hostPath string) corev1.PodSpec {
		s.Volumes = []corev1.Volume{{Name: "p", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostPath}}}}
		return s
	}
	withHostPID := func(s corev1.PodSpec) corev1.PodSpec { s.HostPID = true; return s }
	mounted := []string{"--proc-root=/host/proc"}
	at := corev1.VolumeMount{Name: "p", MountPath: "/host/proc"}
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want bool
	}{
		{"the shipped base DaemonSet", ds.Spec.Template.Spec, true},
		{"own PID namespace, its own /proc", agent(nil), false},
		{"hostPID", withHostPID(agent(nil)), true},
		{"the host's /proc at --proc-root", hostProc(agent(mounted, at), "/proc"), true},
		{"--proc-root without the mount", agent(mounted), false},
		{"another host path at --proc-root", hostProc(agent(mounted, at), "/var/proc"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := seesHostPIDs(tc.spec); got != tc.want {
				t.Errorf("sees host PIDs: %v, want %v", got, tc.want)
			}
		})
	}
}
