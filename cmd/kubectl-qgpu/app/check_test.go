package app

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/internal/view"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// bound places a pod on n1 with one slice of card 0 of builders.Cards.
func bound(t *testing.T, b *builders.PodBuilder, gib, cores int64) v1.Pod {
	t.Helper()
	pod := b.Obj()
	class, err := protocol.ParseClass(pod.Annotations[protocol.AnnotationAppClass], pod.Annotations[protocol.AnnotationAppClass] != "")
	if err != nil {
		t.Fatal(err)
	}
	a := protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(pod.UID), Node: "n1", Class: class,
		Containers: []protocol.ContainerAssignment{{Name: "c", Slices: []protocol.Slice{{Index: 0, UUID: "GPU-T4-00", MemoryGiB: gib, Cores: cores}}}}}
	raw, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations[protocol.AnnotationAssignment] = raw
	pod.Spec.NodeName, pod.Status.Phase = "n1", v1.PodRunning
	return *pod
}

func TestPrintCheck(t *testing.T) {
	node := builders.GPUNode("n1", false, builders.Cards(1, "T4", 16<<10))
	cases := []struct {
		name  string
		nodes []v1.Node
		pods  func(t *testing.T) []v1.Pod
		want  string
		count int
	}{
		{"clean", []v1.Node{*node}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{bound(t, builders.GPUPod("a").General("c", 4, 10), 4, 10)}
		}, "violations 0\n", 0},
		{"a warning is not counted", []v1.Node{*node}, func(t *testing.T) []v1.Pod {
			return []v1.Pod{bound(t, builders.GPUPod("a").Online("c", 4), 4, 0)}
		}, "warning: NotMixedNode default/a: an online pod on n1, which is not labelled mixed-qgpu-enable=enable (not counted: it may have changed after the pod was placed)\nviolations 0\n", 0},
		{"Node object gone under three 10 GiB pods", nil, func(t *testing.T) []v1.Pod {
			return []v1.Pod{
				bound(t, builders.GPUPod("a").General("c", 10, 10), 10, 10),
				bound(t, builders.GPUPod("b").General("c", 10, 10), 10, 10),
				bound(t, builders.GPUPod("c").General("c", 10, 10), 10, 10),
			}
		}, "NodeUnknown n1: 3 qGPU pods hold slices on a node whose capacity is unknown (no Node object): default/a, default/b, default/c\nviolations 1\n", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			r := checkReport(view.Build(tc.nodes, tc.pods(t), 0), nil, nil)
			printCheck(&out, r)
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if n := len(r.Violations); n != tc.count {
				t.Errorf("count %d, want %d", n, tc.count)
			}
		})
	}
}

// check prints text, json or yaml, and exits as kubectl diff does: 0
// clean, 1 violations (whatever -o), 2 when it could not check.
func TestCheckCommand(t *testing.T) {
	objs := cluster(t) // n1, n2, then the pods on n1
	clean := append([]runtime.Object{schedulerConfigMap(4)}, objs...)
	nodeGone := append([]runtime.Object{schedulerConfigMap(4)}, objs[2:]...)
	violation := Finding{Reason: "NodeUnknown", Object: "n1",
		Message: "2 qGPU pods hold slices on a node whose capacity is unknown (no Node object): team-a/a, team-b/b"}
	report := func(v ...Finding) *CheckReport {
		return &CheckReport{TypeMeta: metav1.TypeMeta{APIVersion: "kubectl.qgpu.io/v1alpha1", Kind: "CheckReport"},
			Violations: append([]Finding{}, v...), Warnings: []Finding{}, Swapped: []string{}}
	}
	cases := []struct {
		name       string
		objs       []runtime.Object
		forbid     []string
		args       []string
		wantCode   int
		wantText   string
		wantReport *CheckReport
		wantStderr string
	}{
		{"clean", clean, nil, []string{"check"}, 0, "violations 0\n", nil, ""},
		{"clean, json", clean, nil, []string{"check", "-o", "json"}, 0, "", report(), ""},
		{"violations", nodeGone, nil, []string{"check"}, 1, violation.Reason + " n1: " + violation.Message + "\nviolations 1\n", nil, ""},
		{"violations, json", nodeGone, nil, []string{"check", "-o", "json"}, 1, "", report(violation), ""},
		{"violations, yaml", nodeGone, nil, []string{"check", "--output=yaml"}, 1, "", report(violation), ""},
		{"forbidden", clean, []string{"list nodes"}, []string{"check"}, 2, "", nil, "Error: listing nodes: forbidden for your credentials"},
		{"unknown -o", clean, nil, []string{"check", "-o", "wide"}, 2, "", nil, `Error: --output: invalid value "wide": one of json, yaml`},
		{"unknown flag", clean, nil, []string{"check", "--no-such-flag"}, 2, "", nil, "Error: unknown flag: --no-such-flag"},
		{"an argument", clean, nil, []string{"check", "n1"}, 2, "", nil, `Error: unknown command "n1"`},
		{"other commands still exit 1 on errors", clean, []string{"list nodes"}, []string{"nodes"}, 1, "", nil, "Error: listing nodes: forbidden"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, _, err := run(t, tc.objs, tc.forbid, tc.args...)
			if got := ExitCode(err); got != tc.wantCode {
				t.Errorf("exit status %d (%v), want %d", got, err, tc.wantCode)
			}
			if tc.wantReport != nil {
				var got CheckReport
				if err := yaml.UnmarshalStrict([]byte(out), &got); err != nil {
					t.Fatalf("%v in %q", err, out)
				}
				if diff := cmp.Diff(tc.wantReport, &got); diff != "" {
					t.Errorf("report (-want +got):\n%s", diff)
				}
			} else if diff := cmp.Diff(tc.wantText, out); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if !strings.Contains(errOut, tc.wantStderr) || tc.wantStderr == "" && errOut != "" {
				t.Errorf("stderr %q, want %q", errOut, tc.wantStderr)
			}
		})
	}
}
