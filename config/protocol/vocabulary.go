package protocol

import (
	"fmt"
	"slices"
	"strings"
)

// Vocabulary names a pod dialect of a system qgpu-scheduler replaces
// (docs/vocabularies.md); "" is the native qGPU one. The scheduler's plugin
// args and the agent's flag name the vocabularies a cluster or a node reads.
// The names live here, below both, so that the scheduler's configuration
// (config/args) validates them without importing the plugin; the plugin's
// vocab package reads the dialects.
type Vocabulary string

const (
	VocabularyNative Vocabulary = ""
	// VocabularyVCUDA is tkestack gpu-admission / gpu-manager.
	VocabularyVCUDA Vocabulary = "vcuda"
	// VocabularyT9k is the T9k scheduler (tensorstack.dev).
	VocabularyT9k Vocabulary = "t9k"
	// VocabularyHAMi is Project-HAMi's NVIDIA device.
	VocabularyHAMi Vocabulary = "hami"
)

// Vocabularies lists the vocabularies a cluster or a node can enable.
var Vocabularies = []Vocabulary{VocabularyVCUDA, VocabularyT9k, VocabularyHAMi}

// ParseVocabulary reads a vocabulary name, as the plugin args and the
// agent's flag write it (case and surrounding spaces aside).
func ParseVocabulary(s string) (Vocabulary, error) {
	v := Vocabulary(strings.ToLower(strings.TrimSpace(s)))
	if !slices.Contains(Vocabularies, v) {
		return "", fmt.Errorf("unknown vocabulary %q: must be one of %s", s, strings.Join(VocabularyNames(), ", "))
	}
	return v, nil
}

// VocabularyNames returns Vocabularies as strings.
func VocabularyNames() []string {
	out := make([]string, len(Vocabularies))
	for i, v := range Vocabularies {
		out[i] = string(v)
	}
	return out
}
