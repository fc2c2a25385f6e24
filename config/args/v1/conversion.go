package v1

import (
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/qgpu-scheduler/qgpu/config/args"
)

func addConversionFuncs(scheme *runtime.Scheme) error {
	if err := scheme.AddConversionFunc((*QGPUArgs)(nil), (*args.QGPUArgs)(nil), func(a, b any, s conversion.Scope) error {
		return Convert_v1_QGPUArgs_To_args_QGPUArgs(a.(*QGPUArgs), b.(*args.QGPUArgs), s)
	}); err != nil {
		return err
	}
	return scheme.AddConversionFunc((*args.QGPUArgs)(nil), (*QGPUArgs)(nil), func(a, b any, s conversion.Scope) error {
		return Convert_args_QGPUArgs_To_v1_QGPUArgs(a.(*args.QGPUArgs), b.(*QGPUArgs), s)
	})
}

// Convert_v1_QGPUArgs_To_args_QGPUArgs converts to the internal type; unset
// fields take their defaults, so the result never depends on whether
// defaulting ran first.
func Convert_v1_QGPUArgs_To_args_QGPUArgs(in *QGPUArgs, out *args.QGPUArgs, _ conversion.Scope) error { //nolint:revive
	d := in.DeepCopyObject().(*QGPUArgs)
	SetDefaults_QGPUArgs(d)
	out.NodePolicy, out.CardPolicy, out.MaxPodsPerCard = *d.NodePolicy, *d.CardPolicy, *d.MaxPodsPerCard
	out.Vocabularies, out.VCUDAMemoryUnitMiB = append([]string(nil), d.Vocabularies...), *d.VCUDAMemoryUnitMiB
	return nil
}

// Convert_args_QGPUArgs_To_v1_QGPUArgs converts to the versioned type.
func Convert_args_QGPUArgs_To_v1_QGPUArgs(in *args.QGPUArgs, out *QGPUArgs, _ conversion.Scope) error { //nolint:revive
	out.NodePolicy, out.CardPolicy, out.MaxPodsPerCard = ptr(in.NodePolicy), ptr(in.CardPolicy), ptr(in.MaxPodsPerCard)
	out.Vocabularies, out.VCUDAMemoryUnitMiB = append([]string(nil), in.Vocabularies...), ptr(in.VCUDAMemoryUnitMiB)
	return nil
}
