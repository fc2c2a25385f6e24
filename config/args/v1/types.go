// Package v1 is the versioned form of the qgpu plugin args, as written in a
// KubeSchedulerConfiguration (apiVersion kubescheduler.config.k8s.io/v1,
// kind QGPUArgs), with defaults and conversions.
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	schedv1 "k8s.io/kube-scheduler/config/v1"
)

// QGPUArgs configures the qgpu plugin.
type QGPUArgs struct {
	metav1.TypeMeta `json:",inline"`

	// NodePolicy orders nodes for general pods: fragfit (default), binpack,
	// spread, bestfit, fgd or fragfit (plugins/qgpu/placement/policy.go).
	NodePolicy *string `json:"nodePolicy,omitempty"`
	// CardPolicy orders a node's cards for general pods, same names.
	CardPolicy *string `json:"cardPolicy,omitempty"`
	// MaxPodsPerCard caps the pods on one card; 0 (default) is card GiB / 4.
	MaxPodsPerCard *int32 `json:"maxPodsPerCard,omitempty"`
	// Vocabularies every node takes besides qGPU's own: vcuda, t9k, hami
	// (default none; nodes may enable them by label).
	Vocabularies []string `json:"vocabularies,omitempty"`
	// VCUDAMemoryUnitMiB is the MiB of one nvidia.com/vcuda-memory unit (default 1).
	VCUDAMemoryUnitMiB *int64 `json:"vcudaMemoryUnitMiB,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (a *QGPUArgs) DeepCopyObject() runtime.Object {
	out := *a
	out.NodePolicy = copyPtr(a.NodePolicy)
	out.CardPolicy = copyPtr(a.CardPolicy)
	out.MaxPodsPerCard = copyPtr(a.MaxPodsPerCard)
	out.Vocabularies = append([]string(nil), a.Vocabularies...)
	out.VCUDAMemoryUnitMiB = copyPtr(a.VCUDAMemoryUnitMiB)
	return &out
}

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// SetDefaults_QGPUArgs fills unset fields: general pods placed by fragfit
// (docs/performance.md#fragfit-the-shipped-default).
func SetDefaults_QGPUArgs(a *QGPUArgs) { //nolint:revive // kube naming convention
	if a.NodePolicy == nil {
		a.NodePolicy = ptr("fragfit")
	}
	if a.CardPolicy == nil {
		a.CardPolicy = ptr("fragfit")
	}
	if a.MaxPodsPerCard == nil {
		a.MaxPodsPerCard = ptr[int32](0)
	}
	if a.VCUDAMemoryUnitMiB == nil {
		a.VCUDAMemoryUnitMiB = ptr[int64](1)
	}
}

func ptr[T any](v T) *T { return &v }

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(schedv1.SchemeGroupVersion, &QGPUArgs{})
	return nil
}

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	scheme.AddTypeDefaultingFunc(&QGPUArgs{}, func(obj any) { SetDefaults_QGPUArgs(obj.(*QGPUArgs)) })
	return nil
}
