package view

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/test/builders"
)

func TestPodSecurityWarnings(t *testing.T) {
	ns := func(name string, labels map[string]string) v1.Namespace {
		return v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	inNS := func(name, namespace string) v1.Pod {
		p := placed(t, builders.GPUPod(name).General("c", 2, 10), one(sl(0, 2, 10)))
		p.Namespace = namespace
		return p
	}
	c := Build([]v1.Node{*gpuNode(false)}, []v1.Pod{inNS("a", "open"), inNS("b", "unset"), inNS("c", "base"), inNS("d", "strict")}, 0)
	got := c.PodSecurityWarnings([]v1.Namespace{
		ns("open", map[string]string{LabelPodSecurityEnforce: "privileged"}),
		ns("unset", nil),
		ns("base", map[string]string{LabelPodSecurityEnforce: "baseline"}),
		ns("strict", map[string]string{LabelPodSecurityEnforce: "restricted"}),
		ns("empty", nil), // no qGPU pods
	})
	if len(got) != 2 || got[0].Object != "open" || got[1].Object != "unset" || got[0].Kind != "PodSecurity" {
		t.Fatalf("got %v, want warnings for open and unset", got)
	}
}
