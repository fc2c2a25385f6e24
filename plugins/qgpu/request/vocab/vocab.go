// Package vocab reads the pod vocabularies of the systems qgpu-scheduler
// replaces (tkestack gpu-manager's vcuda, T9k's three GPU modes, HAMi) and
// translates each container's ask into the product's own terms: memory,
// cores, whole cards. The request package then applies the native rules to
// the result, so every vocabulary shares one accounting
// (docs/vocabularies.md). It imports nothing from the scheduler framework:
// the agent uses the same names.
package vocab

import (
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Vocabulary names a pod dialect; "" is the native qGPU one. The names are
// protocol's (config/protocol/vocabulary.go), so that the scheduler's
// configuration validates them without importing this package.
type Vocabulary = protocol.Vocabulary

const (
	Native = protocol.VocabularyNative
	// VCUDA is tkestack gpu-admission / gpu-manager.
	VCUDA = protocol.VocabularyVCUDA
	// T9k is the T9k scheduler (tensorstack.dev).
	T9k = protocol.VocabularyT9k
	// HAMi is Project-HAMi's NVIDIA device.
	HAMi = protocol.VocabularyHAMi
)

// All lists the vocabularies a cluster or a node can enable.
var All = protocol.Vocabularies

// Parse reads a vocabulary name, as the plugin args and the agent's flag write it.
func Parse(s string) (Vocabulary, error) { return protocol.ParseVocabulary(s) }

// Names returns All as strings.
func Names() []string { return protocol.VocabularyNames() }

// Resources of each vocabulary, per container.
const (
	// VCUDACore is percent of one card; 100·k takes k whole cards.
	VCUDACore = "nvidia.com/vcuda-core"
	// VCUDAMemory is card memory in units of Options.VCUDAMemoryUnitMiB.
	VCUDAMemory = "nvidia.com/vcuda-memory"
	// AnnotationVCUDACoreLimit is a pod annotation: the compute ceiling
	// (percent of a card) a container may burst to above its vcuda-core.
	AnnotationVCUDACoreLimit = "nvidia.com/vcuda-core-limit"

	// T9kGPU is N whole cards, exclusive.
	T9kGPU = "tensorstack.dev/nvidia-gpu"
	// T9kGPUPercent is P percent of one card's memory.
	T9kGPUPercent = "tensorstack.dev/nvidia-gpu-percent"
	// T9kGPUNode (value 1) takes the whole node: every card, no other GPU pod.
	T9kGPUNode = "tensorstack.dev/nvidia-gpu-node"

	// HAMiGPU is the number of cards (shared ones, in HAMi).
	HAMiGPU = "nvidia.com/gpu"
	// HAMiMemory is MiB of each card.
	HAMiMemory = "nvidia.com/gpumem"
	// HAMiMemoryPercent is percent of each card's memory.
	HAMiMemoryPercent = "nvidia.com/gpumem-percentage"
	// HAMiCores is percent of each card's compute.
	HAMiCores = "nvidia.com/gpucores"
)

// LabelPrefix + vocabulary, with value "enable", enables a vocabulary on a
// node (vocabulary.qgpu.io/vcuda=enable).
const LabelPrefix = "vocabulary.qgpu.io/"

// Label is the node label that enables v on a node.
func Label(v Vocabulary) string { return LabelPrefix + string(v) }

// Resources returns the extended resources of v, in a fixed order. The
// slice is shared: callers must not change it.
func Resources(v Vocabulary) []string {
	switch v {
	case VCUDA:
		return vcudaResources
	case T9k:
		return t9kResources
	case HAMi:
		return hamiResources
	}
	return nil
}

// Package-level so that reading a pod allocates nothing (Parse runs in
// PreFilter and in the queueing hints).
var (
	vcudaResources = []string{VCUDACore, VCUDAMemory}
	t9kResources   = []string{T9kGPU, T9kGPUPercent, T9kGPUNode}
	hamiResources  = []string{HAMiGPU, HAMiMemory, HAMiMemoryPercent, HAMiCores}
	// hamiExtras are HAMi's resources but nvidia.com/gpu, which alone is
	// HAMi's only when Options.HAMiWholeGPU says so.
	hamiExtras = []string{HAMiMemory, HAMiMemoryPercent, HAMiCores}
)

// Advertised returns the resources of v that the agent serves as device
// plugins, with how many devices each card contributes. The others (memory
// in MiB, HAMi's percentages) are accounted by the scheduler's ledger alone:
// one device per MiB would be hundreds of thousands of device IDs per node,
// and the kubelet admits a pod whose extended resource its node does not
// list (docs/vocabularies.md#what-the-agent-advertises).
func Advertised(v Vocabulary) []string {
	switch v {
	case VCUDA:
		return []string{VCUDACore}
	case T9k:
		return []string{T9kGPU, T9kGPUPercent, T9kGPUNode}
	case HAMi:
		return []string{HAMiGPU}
	}
	return nil
}

// Unadvertised returns the resources of every vocabulary that no device
// plugin serves: the scheduler's ledger alone accounts them.
func Unadvertised() []string { return unadvertised }

var unadvertised = func() []string {
	var out []string
	for _, v := range All {
		for _, r := range Resources(v) {
			if !slices.Contains(Advertised(v), r) {
				out = append(out, r)
			}
		}
	}
	return out
}()

// Of returns the vocabulary resource belongs to, and whether it belongs to one.
func Of(resource string) (Vocabulary, bool) {
	for _, v := range All {
		if slices.Contains(Resources(v), resource) {
			return v, true
		}
	}
	return Native, false
}

// firstOf returns the first resource of names the container sets.
func firstOf(c *v1.Container, names []string) (string, bool) {
	for _, n := range names {
		if _, ok := c.Resources.Limits[v1.ResourceName(n)]; ok {
			return n, true
		}
		if _, ok := c.Resources.Requests[v1.ResourceName(n)]; ok {
			return n, true
		}
	}
	return "", false
}
