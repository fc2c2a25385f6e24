package fastpath

import (
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Check gives NodeResourcesFit's reason for the first resource short, and
// says unresolvable only when the node has less than the pod asks for at
// all. (The plugin's tests run it behind the real NodeResourcesFit:
// plugins/qgpu/fit_test.go.)
func TestFitRequestCheck(t *testing.T) {
	type sums = [len(protocol.Resources)]int64
	tests := []struct {
		name             string
		req, used, alloc sums
		want             string
		unresolvable     bool
	}{
		{"fits", sums{8, 25}, sums{8, 25}, sums{32, 100}, "", false},
		{"memory short now", sums{8, 25}, sums{30, 25}, sums{32, 100}, "Insufficient " + protocol.Resources[0], false},
		{"memory short ever", sums{40, 25}, sums{}, sums{32, 100}, "Insufficient " + protocol.Resources[0], true},
		{"cores short now", sums{8, 80}, sums{8, 25}, sums{32, 100}, "Insufficient " + protocol.Resources[1], false},
		{"nothing asked of a node with nothing", sums{}, sums{}, sums{}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := FitRequest(tt.req)
			got, unresolvable := r.Check(tt.used, tt.alloc)
			if got != tt.want || unresolvable != tt.unresolvable {
				t.Errorf("Check = %q, %v; want %q, %v", got, unresolvable, tt.want, tt.unresolvable)
			}
		})
	}
}

// Without NodeResourcesFit's state nothing moves.
func TestTakeOverFitWithoutState(t *testing.T) {
	if r, ok := TakeOverFit(framework.NewCycleState()); ok || r != (FitRequest{}) {
		t.Errorf("TakeOverFit = %v, %v on a cycle without NodeResourcesFit's state", r, ok)
	}
}
