package qgpu

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/qgpu-scheduler/qgpu/config/args"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// Every placement policy is accepted by the args validation, and nothing else.
func TestArgsAcceptEveryPolicy(t *testing.T) {
	tests := []struct {
		policy string
		valid  bool
	}{{"nope", false}, {"", false}, {"FGD", false}}
	for _, p := range placement.Policies {
		tests = append(tests, struct {
			policy string
			valid  bool
		}{string(p), true})
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			a := &args.QGPUArgs{NodePolicy: tt.policy, CardPolicy: tt.policy}
			errs := args.Validate(field.NewPath("args"), a)
			if got := len(errs) == 0; got != tt.valid {
				t.Errorf("Validate(%q) = %v, want valid %v", tt.policy, errs, tt.valid)
			}
			if got := placement.Policy(tt.policy).Valid(); got != tt.valid {
				t.Errorf("Policy(%q).Valid() = %v, want %v", tt.policy, got, tt.valid)
			}
		})
	}
}

// fragpack learns the workload from the pods it places and then fills the
// node whose fragmentation grows least.
func TestFragPackLearnsWorkload(t *testing.T) {
	p := newPlugin(t, &args.QGPUArgs{NodePolicy: "fragpack", CardPolicy: "fragpack"})
	if p.workload.Load() != nil {
		t.Fatal("workload before any pod")
	}
	n := v100Node("n1", 2, false)
	p.setNodes(n)
	var got []string
	for i, size := range []int64{8, 8, 16} {
		pod := builders.GPUPod(fmt.Sprintf("p%d", i)).General("c", size, 25).Obj()
		node, st := schedule(t, p, pod, n)
		if node == "" {
			t.Fatalf("pod %d: %v", i, st)
		}
		got = append(got, node)
	}
	if diff := cmp.Diff([]string{"n1", "n1", "n1"}, got); diff != "" {
		t.Error(diff)
	}
	if w := p.workload.Load(); w == nil || w.Len() != 2 {
		t.Fatalf("learned workload %v, want 2 shapes", w)
	}
}
