package args

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Policies a profile may name: placement.Policies (a test in plugins/qgpu
// keeps the two lists equal; this package imports no plugin code).
var policies = []string{"binpack", "spread", "bestfit", "fgd", "fragfit"}

// Validate checks the args; path is where they sit in the profile.
func Validate(path *field.Path, a *QGPUArgs) field.ErrorList {
	var errs field.ErrorList
	for _, p := range []struct {
		name, value string
	}{{"nodePolicy", a.NodePolicy}, {"cardPolicy", a.CardPolicy}} {
		if !contains(policies, p.value) {
			errs = append(errs, field.NotSupported(path.Child(p.name), p.value, policies))
		}
	}
	if a.MaxPodsPerCard < 0 || a.MaxPodsPerCard > 1024 {
		errs = append(errs, field.Invalid(path.Child("maxPodsPerCard"), a.MaxPodsPerCard, "must be between 0 (card memory in GiB / 4) and 1024"))
	}
	return append(errs, validateVocabularies(path, a)...)
}

// validateVocabularies checks the vocabulary names (each once) and the vcuda
// memory unit.
func validateVocabularies(path *field.Path, a *QGPUArgs) field.ErrorList {
	var errs field.ErrorList
	seen := map[protocol.Vocabulary]bool{}
	for i, name := range a.Vocabularies {
		v, err := protocol.ParseVocabulary(name)
		switch {
		case err != nil:
			errs = append(errs, field.NotSupported(path.Child("vocabularies").Index(i), name, protocol.VocabularyNames()))
		case seen[v]:
			errs = append(errs, field.Duplicate(path.Child("vocabularies").Index(i), name))
		}
		seen[v] = true
	}
	if a.VCUDAMemoryUnitMiB < 0 || a.VCUDAMemoryUnitMiB > 1024 {
		errs = append(errs, field.Invalid(path.Child("vcudaMemoryUnitMiB"), a.VCUDAMemoryUnitMiB, "must be between 1 and 1024 MiB (1, the default: the gpu-admission document's MiB; 256: tkestack gpu-manager's unit)"))
	}
	return errs
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
