package enforce

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

func TestVocabularyEnv(t *testing.T) {
	pod := func(annotations map[string]string, limits v1.ResourceList) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Limits: limits}}}}}
	}
	shared := []protocol.Slice{{Index: 0, UUID: "GPU-0", MemoryGiB: 5, Cores: 30}}
	tests := []struct {
		name     string
		resource string
		pod      *v1.Pod
		slices   []protocol.Slice
		in, want map[string]string
	}{
		{"t9k percent", vocab.T9kGPUPercent, pod(nil, nil), shared,
			map[string]string{}, map[string]string{"T9K_GPU_PERCENT": "30", "T9K_GPU_MEMORY": "5120"}},
		{"t9k whole cards: the backend's UUIDs only", vocab.T9kGPU, pod(nil, nil),
			[]protocol.Slice{{UUID: "GPU-0", MemoryGiB: 15, Cores: 100}, {Index: 1, UUID: "GPU-1", MemoryGiB: 15, Cores: 100}},
			map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1"}, map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1"}},
		{"t9k node-exclusive: all", vocab.T9kGPUNode, pod(nil, nil),
			[]protocol.Slice{{UUID: "GPU-0", MemoryGiB: 15, Cores: 100}, {Index: 1, UUID: "GPU-1", MemoryGiB: 15, Cores: 100}},
			map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1"}, map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}},
		{"vcuda ceiling replaces the backend's cap", vocab.VCUDACore, pod(map[string]string{vocab.AnnotationVCUDACoreLimit: "60"}, nil), shared,
			map[string]string{smLimit: "30"}, map[string]string{smLimit: "60"}},
		{"vcuda ceiling where the backend caps nothing", vocab.VCUDACore, pod(map[string]string{vocab.AnnotationVCUDACoreLimit: "60"}, nil), shared,
			map[string]string{}, map[string]string{}},
		{"hami without gpucores is not throttled", vocab.HAMiGPU, pod(nil, nil), shared,
			map[string]string{smLimit: "1"}, map[string]string{smLimit: "0"}},
		{"vcuda ceiling replaces the per-card caps too", vocab.VCUDACore, pod(map[string]string{vocab.AnnotationVCUDACoreLimit: "60"}, nil), shared,
			map[string]string{smLimit: "30", smLimit + "_0": "30", smLimit + "_15": "30"},
			map[string]string{smLimit: "60", smLimit + "_0": "60", smLimit + "_15": "60"}},
		{"hami without gpucores: no per-card cap either", vocab.HAMiGPU, pod(nil, nil), shared,
			map[string]string{smLimit: "30", smLimit + "_0": "30", smLimit + "_15": "30"},
			map[string]string{smLimit: "0", smLimit + "_0": "0", smLimit + "_15": "0"}},
		{"hami gpucores keeps the backend's cap", vocab.HAMiGPU,
			pod(nil, v1.ResourceList{vocab.HAMiCores: resource.MustParse("30")}), shared,
			map[string]string{smLimit: "30"}, map[string]string{smLimit: "30"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			VocabularyEnv(tt.resource, tt.pod, "c", tt.slices, tt.in)
			if diff := cmp.Diff(tt.want, tt.in); diff != "" {
				t.Errorf("envs (-want +got):\n%s", diff)
			}
		})
	}
}
