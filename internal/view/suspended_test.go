package view

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func TestSuspendedPods(t *testing.T) {
	since := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	pod := func(uid, value string) v1.Pod {
		p := v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Annotations: map[string]string{}}}
		if value != "" {
			p.Annotations[protocol.AnnotationSuspended] = value
		}
		return p
	}
	s := SuspendedPods([]v1.Pod{pod("a", protocol.Suspension{Since: since}.Encode()), pod("b", ""), pod("c", "garbage")})
	if len(s) != 2 || !s["a"].Since.Equal(since) || !s["c"].Since.IsZero() {
		t.Errorf("got %v", s)
	}
	if _, ok := s["b"]; ok {
		t.Error("pod without the annotation counted")
	}
}
