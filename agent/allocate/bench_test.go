package allocate

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// BenchmarkAllocate measures one Allocate call (match over the node's pods,
// backend, one fsynced bbolt transaction) on a node with b.N waiting pods.
func BenchmarkAllocate(b *testing.B) {
	var pods []*v1.Pod
	for i := range b.N {
		pods = append(pods, general(fmt.Sprintf("p%05d", i), i, 4, 30, i%8))
	}
	a, _ := newAllocator(b, filepath.Join(b.TempDir(), "meta.db"), &fakePods{cached: pods})
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if _, err := a.Allocate(ctx, protocol.ResourceMemory, ids(fmt.Sprintf("m%d", i), 4)); err != nil {
			b.Fatal(err)
		}
	}
}
