package main

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/e2enode/verify"
)

// The tenant suite's MPS directories (tenant.go).

// mpsDirectories, on n labelled mps: a tenant's MPS client (root, as
// baseline allows) writes into the pipe directory, read-only (control: the
// same write with the card's pipe directory mounted read-write); a client
// on another card reads the first one's /dev/shm segment, absent there
// (per-card shm; control: the same read with the first card's shm
// directory mounted).
func (t *tenantSuite) mpsDirectories(n *node) {
	const pipeKey, shmKey = "write into the MPS pipe directory", "read another card's /dev/shm segment"
	if err := labelNode(t.ctx, t.cp, n.name, map[string]string{protocol.LabelEnforcement: "mps",
		protocol.LabelSchedulePolicy: string(protocol.PolicyFixedShare)}); err != nil {
		t.fail("labelling %s mps: %v", n.name, err)
		return
	}
	if err := waitMPSDaemon(t.ctx, t.cp, n); err != nil {
		t.fail("%v", err)
	}
	client := func(name, gpuType string, env ...corev1.EnvVar) (*corev1.Pod, []verify.Line, error) {
		var last error
		for attempt := 1; attempt <= 3; attempt++ {
			p := t.pod(tenantNamespace, fmt.Sprintf("%s-%d", name, attempt), n, env...)
			p.Spec.SchedulerName = protocol.SchedulerName
			p.Annotations = map[string]string{protocol.AnnotationUseGPUType: gpuType}
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
				protocol.ResourceMemory: resource.MustParse("2"), protocol.ResourceCore: resource.MustParse("20")}
			t.res.containers++
			p, err := t.tenant.CoreV1().Pods(tenantNamespace).Create(t.ctx, p, metav1.CreateOptions{})
			if err != nil {
				return nil, nil, err
			}
			if p, err = waitPodSettledIn(t.ctx, t.cp, tenantNamespace, p.Name); err == nil {
				lines, err := containerOutput(n.dir, p, "probe")
				if err == nil && verify.Backend(lines) == "mps" {
					return p, lines, nil
				}
				last = fmt.Errorf("%s: backend %q: %v", p.Name, verify.Backend(lines), err)
			} else {
				last = fmt.Errorf("%s: %w", p.Name, err)
			}
			fmt.Println("  retrying:", last)
			_ = t.cp.Client.CoreV1().Pods(tenantNamespace).Delete(t.ctx, p.Name, metav1.DeleteOptions{})
		}
		return nil, nil, last
	}
	const segment = "qgpu-e2e-tenant-segment"
	x, xLines, err := client("tenant-mps-t4", "t4", corev1.EnvVar{Name: "PROBE_MPS_PIPE_WRITE", Value: "1"},
		corev1.EnvVar{Name: "PROBE_SHM_WRITE", Value: segment})
	if err != nil {
		t.fail("an MPS client on %s: %v", n.name, err)
		t.notAttempted(pipeKey, err.Error())
		t.notAttempted(shmKey, err.Error())
		return
	}
	uuid := firstUUID(x)
	switch v := attemptLine(xLines, "mps-pipe-write"); {
	case strings.HasPrefix(v, "refused:"):
		t.refused(pipeKey, "the read-only bind of the card's pipe directory ("+v+")")
	case v == "":
		t.notAttempted(pipeKey, "the probe printed no mps-pipe-write line")
	default:
		t.escaped(pipeKey, v)
	}
	hostDir := func(sub string) corev1.VolumeSource {
		return corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/qgpu/mps/" + uuid + "/" + sub}}
	}
	ctl := t.pod(controlNamespace, "tenant-control-pipe", n, corev1.EnvVar{Name: "PROBE_MPS_PIPE_WRITE", Value: "1"})
	ctl.Spec.Volumes = []corev1.Volume{{Name: "pipe", VolumeSource: hostDir("pipe")}}
	ctl.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "pipe", MountPath: "/tmp/nvidia-mps"}}
	if _, lines, err := t.controlPod(n, ctl); err != nil {
		t.fail("%s: control: %v", pipeKey, err)
	} else {
		v := attemptLine(lines, "mps-pipe-write")
		t.control(pipeKey, strings.HasPrefix(v, "written"), "(the card's pipe directory mounted read-write): "+v)
	}

	if !hasLine(xLines, "shm-written", segment) {
		t.fail("%s: %s wrote no segment /dev/shm/%s", shmKey, x.Name, segment)
		t.notAttempted(shmKey, "no segment written")
		return
	}
	y, yLines, err := client("tenant-mps-v100", "v100", corev1.EnvVar{Name: "PROBE_SHM_READ", Value: segment})
	if err != nil {
		t.fail("a second MPS client on %s: %v", n.name, err)
		t.notAttempted(shmKey, err.Error())
		return
	}
	if other := firstUUID(y); other == uuid {
		t.notAttempted(shmKey, "both clients on card "+uuid)
	} else {
		switch v := attemptLine(yLines, "shm-read"); {
		case strings.HasPrefix(v, "absent:"):
			t.refused(shmKey, "the per-card /dev/shm (card "+other+"'s, not "+uuid+"'s): "+v)
		case v == "":
			t.notAttempted(shmKey, "the probe printed no shm-read line")
		default:
			t.escaped(shmKey, v)
		}
	}
	ctl = t.pod(controlNamespace, "tenant-control-shm", n, corev1.EnvVar{Name: "PROBE_SHM_READ", Value: segment})
	ctl.Spec.Volumes = []corev1.Volume{{Name: "shm", VolumeSource: hostDir("shm")}}
	ctl.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "shm", MountPath: "/dev/shm"}}
	if _, lines, err := t.controlPod(n, ctl); err != nil {
		t.fail("%s: control: %v", shmKey, err)
	} else {
		v := attemptLine(lines, "shm-read")
		t.control(shmKey, strings.HasPrefix(v, "read:"), "(the first card's shm directory, as one shm for the node would be): "+v)
	}
	_ = deleteAndWaitIn(t.ctx, t.cp, tenantNamespace, "app.kubernetes.io/part-of="+tenantLabel)
}

// firstUUID is the card of the pod's first slice ("" without one).
func firstUUID(p *corev1.Pod) string {
	a, err := protocol.DecodeAssignment([]byte(p.Annotations[protocol.AnnotationAssignment]))
	if err != nil || len(a.Containers) == 0 || len(a.Containers[0].Slices) == 0 {
		return ""
	}
	return a.Containers[0].Slices[0].UUID
}

// attemptLine is the value of the probe's attempt line name ("" without).
func attemptLine(lines []verify.Line, name string) string {
	for _, l := range lines {
		if l.Kind == "attempt" && l.Name == name {
			return l.Value
		}
	}
	return ""
}

func hasLine(lines []verify.Line, kind, name string) bool {
	for _, l := range lines {
		if l.Kind == kind && l.Name == name {
			return true
		}
	}
	return false
}
