package verify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// pod is a general pod whose container "main" holds 4 GiB and 30 cores of
// card 1 (GPU-b).
func pod(t *testing.T) *corev1.Pod {
	t.Helper()
	a := &protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: "uid-1", Node: "n1", Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "main", Slices: []protocol.Slice{{Index: 1, UUID: "GPU-b", MemoryGiB: 4, Cores: 30}}}}}
	raw, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-1",
			Annotations: map[string]string{protocol.AnnotationAssignment: raw}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{protocol.ResourceCore: resource.MustParse("30"), protocol.ResourceMemory: resource.MustParse("4")}}}}},
	}
}

func good() []Line {
	return []Line{
		{Kind: "dev", Name: "null", Char: true, Major: 1, Minor: 3},
		{Kind: "dev", Name: "nvidia1", Char: true, Major: 195, Minor: 1},
		{Kind: "dev", Name: "nvidiactl", Char: true, Major: 195, Minor: 255},
		{Kind: "env", Name: "NVIDIA_VISIBLE_DEVICES", Value: "GPU-b"},
		{Kind: "env", Name: "QGPU_MEMORY_GIB", Value: "4"},
		{Kind: "env", Name: "QGPU_CORES", Value: "30"},
		{Kind: "mount", Target: "/etc/hosts"},
	}
}

func TestContainer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func([]Line) []Line
		want   string // a problem containing this; "" for none
	}{
		{"as assigned", func(l []Line) []Line { return l }, ""},
		{"another card", func(l []Line) []Line { return append(l, Line{Kind: "dev", Name: "nvidia0", Char: true, Major: 195}) }, "another card's /dev/nvidia0"},
		{"card missing", func(l []Line) []Line { return l[2:] }, "missing /dev/nvidia1"},
		{"wrong minor", func(l []Line) []Line { l[1].Minor = 3; return l }, "minor 3"},
		{"not a device", func(l []Line) []Line { l[1].Char = false; return l }, "not the driver's character device"},
		{"no control node", func(l []Line) []Line { return append(l[:2], l[3:]...) }, "missing /dev/nvidiactl"},
		{"wrong card in env", func(l []Line) []Line { l[3].Value = "GPU-a"; return l }, "NVIDIA_VISIBLE_DEVICES"},
		{"wrong memory", func(l []Line) []Line { l[4].Value = "8"; return l }, "QGPU_MEMORY_GIB"},
		{"no cores", func(l []Line) []Line { return l[:5] }, "QGPU_CORES"},
		{"device mounted", func(l []Line) []Line { return append(l, Line{Kind: "mount", Target: "/dev/nvidia0"}) }, "unexpected mount"},
		{"probe error", func(l []Line) []Line { return append(l, Line{Kind: "error", Value: "boom"}) }, "probe: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := Container(pod(t), "main", tc.change(good()), "/run/devs")
			got := strings.Join(problems, "; ")
			if tc.want == "" && len(problems) > 0 || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("problems %q, want one with %q", got, tc.want)
			}
		})
	}
	p := pod(t)
	p.Annotations[protocol.AnnotationAssignment] = "{"
	if problems := Container(p, "main", good(), "/run/devs"); len(problems) == 0 {
		t.Error("a bad assignment annotation passed")
	}
	if problems := Container(pod(t), "other", good(), "/run/devs"); len(problems) == 0 {
		t.Error("a container without slices passed")
	}
}

func TestReadLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	log := `2026-01-01T00:00:00Z stdout F {"kind":"dev","name":"nvidia1","char":true,"major":195,"minor":1}
2026-01-01T00:00:00Z stderr F ignored
2026-01-01T00:00:00Z stdout F {"kind":"env","name":"A","value":"b c"}
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLog(path); err == nil {
		t.Error("a log without its done line was accepted")
	}
	if err := os.WriteFile(path, []byte(log+`2026-01-01T00:00:00Z stdout F {"kind":"done"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lines, err := ReadLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 || lines[0].Minor != 1 || lines[1].Value != "b c" {
		t.Errorf("lines %+v", lines)
	}
}
