package enforce

import (
	"strconv"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

// VocabularyEnv adjusts envs, the backend's answer for a container of a pod
// written in another system's vocabulary (the call came for resource), to
// what that system promises its containers (docs/vocabularies.md#what-a-container-receives):
//
//   - T9k: for nvidia-gpu-percent, T9K_GPU_PERCENT (the percent asked) and
//     T9K_GPU_MEMORY (the memory granted, in MiB: the percent of the card
//     rounded up to whole GiB); for nvidia-gpu-node,
//     NVIDIA_VISIBLE_DEVICES=all (the pod holds every card of the node);
//     nvidia-gpu gets the cards' UUIDs from the backend, as T9k gives them.
//   - vcuda: where the backend caps compute (CUDA_DEVICE_SM_LIMIT), the cap
//     is the pod's nvidia.com/vcuda-core-limit, the ceiling above the
//     guaranteed vcuda-core, as gpu-manager's vcuda-controller applies it.
//   - HAMi: a container that asks no nvidia.com/gpucores (or 0) is not
//     throttled, as in HAMi: CUDA_DEVICE_SM_LIMIT=0 where the backend set one.
//
// NVIDIA_VISIBLE_DEVICES and the memory limits come from the backend.
func VocabularyEnv(resource string, pod *v1.Pod, container string, slices []protocol.Slice, envs map[string]string) {
	if len(slices) == 0 {
		return
	}
	voc, _ := vocab.Of(resource)
	switch voc {
	case vocab.T9k:
		switch resource {
		case vocab.T9kGPUPercent:
			envs["T9K_GPU_PERCENT"] = strconv.FormatInt(min(slices[0].Cores, protocol.CoresPerCard), 10)
			envs["T9K_GPU_MEMORY"] = strconv.FormatInt(slices[0].MemoryGiB*protocol.GiB, 10)
		case vocab.T9kGPUNode:
			// The pod holds every card of the node.
			envs["NVIDIA_VISIBLE_DEVICES"] = "all"
		}
	case vocab.VCUDA:
		if limit, ok := pod.Annotations[vocab.AnnotationVCUDACoreLimit]; ok && envs[smLimit] != "" {
			if _, err := strconv.ParseInt(limit, 10, 64); err == nil {
				setSMLimit(envs, limit)
			}
		}
	case vocab.HAMi:
		if envs[smLimit] != "" && hamiCores(pod, container) == 0 {
			setSMLimit(envs, "0")
		}
	}
}

const smLimit = "CUDA_DEVICE_SM_LIMIT"

// setSMLimit sets the cap and every per-card form the backend set with it
// (hamiCardForms): the library reads a per-card form first.
func setSMLimit(envs map[string]string, v string) {
	envs[smLimit] = v
	for i := range hamiCardForms {
		if k := smLimit + "_" + strconv.Itoa(i); envs[k] != "" {
			envs[k] = v
		}
	}
}

// hamiCores is the container's nvidia.com/gpucores, 0 when absent.
func hamiCores(pod *v1.Pod, container string) int64 {
	for _, c := range pod.Spec.Containers {
		if c.Name != container {
			continue
		}
		if q, ok := c.Resources.Limits[vocab.HAMiCores]; ok {
			return q.Value()
		}
		if q, ok := c.Resources.Requests[vocab.HAMiCores]; ok {
			return q.Value()
		}
	}
	return 0
}
