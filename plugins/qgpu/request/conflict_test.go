package request

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// A model both wanted and refused is a contradiction the user should hear
// about by name, not a generic "no card of the requested model".
func TestParseConflictingModelFilters(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			protocol.AnnotationUseGPUType: "A100, T4", protocol.AnnotationNoUseGPUType: "t4",
		}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{
			protocol.ResourceMemory: resource.MustParse("2"), protocol.ResourceCore: resource.MustParse("10"),
		}}}}},
	}
	_, err := Parse(pod)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `both name model "t4"`) {
		t.Fatalf("Parse: %v, want an ErrInvalid naming model \"t4\"", err)
	}
}
