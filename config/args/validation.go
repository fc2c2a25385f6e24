package args

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Policies a profile may name: placement.Policies (a test in plugins/qgpu
// keeps the two lists equal; this package imports no plugin code).
var policies = []string{"binpack", "spread", "bestfit", "fgd", "fragpack", "fragfit"}

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
