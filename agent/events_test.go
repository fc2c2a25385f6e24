package agent

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testclock "k8s.io/utils/clock/testing"
)

// TestEventCorrelation: the agent's correlator lets the first Event of a
// reason on an object through, drops the rest until eventInterval has
// passed, and never lets one reason silence another on the same pod.
func TestEventCorrelation(t *testing.T) {
	clk := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := record.NewEventCorrelatorWithOptions(eventCorrelation(clk))
	event := func(pod, reason, msg string) *v1.Event {
		return &v1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: pod + "." + reason, Namespace: "default"},
			InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: "default", Name: pod, UID: k8stypes.UID("uid-" + pod)},
			Source:         v1.EventSource{Component: "qgpu-agent", Host: "n1"},
			Type:           v1.EventTypeNormal, Reason: reason, Message: msg,
			FirstTimestamp: metav1.NewTime(clk.Now()), LastTimestamp: metav1.NewTime(clk.Now()), Count: 1,
		}
	}
	sent := func(e *v1.Event) bool {
		r, err := c.EventCorrelate(e)
		if err != nil {
			t.Fatal(err)
		}
		return !r.Skip
	}
	steps := []struct {
		name    string
		advance time.Duration
		pod     string
		reason  string
		want    bool
	}{
		{"first suspension is told", 0, "a", "QGPUSuspended", true},
		{"a second at once is dropped", time.Second, "a", "QGPUSuspended", false},
		{"another reason on the same pod passes", 0, "a", "QGPUAllocateRefused", true},
		{"the same reason on another pod passes", 0, "b", "QGPUSuspended", true},
		{"still inside the interval", 50 * time.Second, "a", "QGPUSuspended", false},
		{"after the interval", 10 * time.Second, "a", "QGPUSuspended", true},
		{"and again dropped", time.Second, "a", "QGPUSuspended", false},
	}
	for _, s := range steps {
		clk.Step(s.advance)
		if got := sent(event(s.pod, s.reason, "Suspended while an online pod on card 0 was busy")); got != s.want {
			t.Errorf("%s: sent %v, want %v", s.name, got, s.want)
		}
	}
}
