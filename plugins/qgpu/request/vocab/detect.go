package vocab

import (
	"fmt"
	"slices"
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
	hamiExtra := false
	forEach(pod, func(c *v1.Container) {
		if _, ok := firstOf(c, []string{HAMiMemory, HAMiMemoryPercent, HAMiCores}); ok {
			hamiExtra = true
		}
	})
	type seen struct {
		voc  Vocabulary
		what string
	}
	var found []seen
	note := func(v Vocabulary, c *v1.Container, res string) {
		for _, s := range found {
			if s.voc == v {
				return
			}
		}
		found = append(found, seen{v, fmt.Sprintf("containers[%s]: %s", c.Name, res)})
	}
	forEach(pod, func(c *v1.Container) {
		if r, ok := firstOf(c, native); ok {
			note(Native, c, r)
		}
		for _, v := range All {
			names := Resources(v)
			if v == HAMi && !hamiExtra && !opts.HAMiWholeGPU {
				names = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == HAMiGPU })
			}
			if r, ok := firstOf(c, names); ok {
				note(v, c, r)
			}
		}
	})
	switch len(found) {
	case 0:
		return Native, nil
	case 1:
		return found[0].voc, nil
	}
	parts := make([]string, len(found))
	for i, s := range found {
		parts[i] = s.what
	}
	return Native, fmt.Errorf("%s: a pod asks for GPUs in one vocabulary only", strings.Join(parts, " and "))
}

// forEach visits init containers, then containers.
func forEach(pod *v1.Pod, f func(*v1.Container)) {
	for i := range pod.Spec.InitContainers {
		f(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		f(&pod.Spec.Containers[i])
	}
}
