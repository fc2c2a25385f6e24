package vocab

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Options are the cluster-wide settings that change how a pod reads.
type Options struct {
	// VCUDAMemoryUnitMiB is the MiB of one nvidia.com/vcuda-memory unit: 1
	// (the gpu-admission document's example reads 1000 as MiB; the default)
	// or 256 (tkestack gpu-manager's block size), or any other positive size.
	VCUDAMemoryUnitMiB int64
	// HAMiWholeGPU reads nvidia.com/gpu alone (no gpumem, gpumem-percentage
	// or gpucores in the pod) as HAMi's. Set when HAMi is enabled
	// cluster-wide: otherwise such a pod is left to NVIDIA's device plugin.
	HAMiWholeGPU bool
}

// DefaultVCUDAMemoryUnitMiB is the document's reading of vcuda-memory.
const DefaultVCUDAMemoryUnitMiB = 1

// Detect returns the one vocabulary the pod is written in, Native when it
// names none of the vocabularies' resources, or an error naming two
// resources of different vocabularies (and the containers that name them).
// native are the product's own resource names.
func Detect(pod *v1.Pod, native []string, opts Options) (Vocabulary, error) {
	hamiGPU := opts.HAMiWholeGPU || podNames(pod, hamiExtras)
	var found [1 + 3]seen // Native and All, each at most once
	n := 0
	for _, cs := range [2][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			c := &cs[i]
			n = note(&found, n, Native, c, native)
			for _, v := range All {
				names := Resources(v)
				if v == HAMi && !hamiGPU {
					names = hamiExtras
				}
				n = note(&found, n, v, c, names)
			}
		}
	}
	switch n {
	case 0:
		return Native, nil
	case 1:
		return found[0].voc, nil
	}
	parts := make([]string, n)
	for i, s := range found[:n] {
		parts[i] = fmt.Sprintf("containers[%s]: %s", s.container, s.resource)
	}
	return Native, fmt.Errorf("%s: a pod asks for GPUs in one vocabulary only", strings.Join(parts, " and "))
}

// seen is the first resource of a vocabulary found in a pod.
type seen struct {
	voc                 Vocabulary
	container, resource string
}

// note records v's first resource among names in c unless v is already
// recorded; it returns the new count.
func note(found *[4]seen, n int, v Vocabulary, c *v1.Container, names []string) int {
	for _, s := range found[:n] {
		if s.voc == v {
			return n
		}
	}
	if r, ok := firstOf(c, names); ok {
		found[n] = seen{voc: v, container: c.Name, resource: r}
		return n + 1
	}
	return n
}

// podNames reports whether any container of the pod names one of names.
func podNames(pod *v1.Pod, names []string) bool {
	for _, cs := range [2][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if _, ok := firstOf(&cs[i], names); ok {
				return true
			}
		}
	}
	return false
}
