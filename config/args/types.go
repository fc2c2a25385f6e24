// Package args is the qgpu plugin's configuration API: the internal QGPUArgs
// type, registered in kube-scheduler's scheme next to the in-tree plugins'
// args, and its validation. The versioned form lives in args/v1.
package args

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
)

// QGPUArgs configures the qgpu plugin.
type QGPUArgs struct {
	metav1.TypeMeta

	// NodePolicy orders nodes for general pods: binpack, spread, bestfit,
	// fgd or fragfit (plugins/qgpu/placement/policy.go).
	NodePolicy string
	// CardPolicy orders the cards of a node for general pods, same names.
	CardPolicy string
	// MaxPodsPerCard caps the pods on one card; 0 means Tencent qGPU's rule,
	// card memory in GiB / 4 (32 GiB → 8).
	MaxPodsPerCard int32
	// Vocabularies are the other systems' pod vocabularies every node takes
	// (vcuda, t9k, hami; docs/vocabularies.md); a node also takes those its
	// vocabulary.qgpu.io/<name>=enable labels name.
	Vocabularies []string
	// VCUDAMemoryUnitMiB is the MiB of one nvidia.com/vcuda-memory unit
	// (0 or 1: MiB, the default; tkestack gpu-manager counts 256).
	VCUDAMemoryUnitMiB int64
}

// DeepCopyObject implements runtime.Object.
func (a *QGPUArgs) DeepCopyObject() runtime.Object {
	out := *a
	out.Vocabularies = append([]string(nil), a.Vocabularies...)
	return &out
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(schedconfig.SchemeGroupVersion, &QGPUArgs{})
	return nil
}

func init() {
	// Registered on kube-scheduler's own builder so that its plugin-args
	// conversion scheme, built lazily from that builder, knows the type too.
	schedconfig.SchemeBuilder.Register(addKnownTypes)
}
