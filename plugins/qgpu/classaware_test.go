package qgpu

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/args"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// A mixed node's cards are the only ones online and offline pods can use: a
// general pod asking for two whole cards goes to the plain node while it
// fits there, in either order of arrival, so the online and offline pods
// still find room; with the plain node full, it may still take the mixed
// node (a preference, not a filter). Every policy keeps to it.
func TestGeneralPodsKeepOffMixedNodes(t *testing.T) {
	whole := func(name string) *v1.Pod { return builders.GPUPod(name).General("c", 20, 200).Obj() }
	online := func(name string) *v1.Pod { return builders.GPUPod(name).Online("c", 8).Obj() }
	offline := func(name string) *v1.Pod { return builders.GPUPod(name).Offline("c", 8, 50).Obj() }
	type step struct {
		pod  *v1.Pod
		want string // "" when it must not fit
	}
	orders := map[string][]step{
		"general first":            {{whole("g1"), "plain"}, {online("on"), "mixed"}, {offline("off"), "mixed"}},
		"online and offline first": {{online("on"), "mixed"}, {offline("off"), "mixed"}, {whole("g1"), "plain"}},
		"plain node full":          {{whole("g1"), "plain"}, {whole("g2"), "plain"}, {whole("g3"), "mixed"}, {online("on"), ""}},
	}
	for _, policy := range []string{"binpack", "spread", "bestfit", "fgd", "fragfit"} {
		for name, steps := range orders {
			t.Run(policy+"/"+name, func(t *testing.T) {
				p := newPlugin(t, &args.QGPUArgs{NodePolicy: policy, CardPolicy: policy})
				mixed, plain := v100Node("mixed", 2, true), v100Node("plain", 4, false)
				p.setNodes(mixed, plain)
				for _, s := range steps {
					got, st := schedule(t, p, s.pod, mixed, plain)
					if s.want == "" {
						if st == nil {
							t.Fatalf("%s placed on %s, want no room", s.pod.Name, got)
						}
						continue
					}
					if st != nil || got != s.want {
						t.Fatalf("%s: node %q (%v), want %s", s.pod.Name, got, st, s.want)
					}
				}
			})
		}
	}
}
