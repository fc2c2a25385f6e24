package agent

import (
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// eventInterval is the least time between two Events of one reason on one
// object: a busy online pod can freeze an offline one many times a second,
// and the priority controller reports each freeze (agent/priority).
const eventInterval = time.Minute

// newRecorder returns the agent's event recorder and the function that
// stops it. Its events go through client-go's correlator, which drops an
// object's events of one reason beyond one per eventInterval and counts
// identical ones on a single Event.
func newRecorder(client kubernetes.Interface, node string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithCorrelatorOptions(eventCorrelation(clock.RealClock{})))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "qgpu-agent", Host: node}), b.Shutdown
}

// eventCorrelation rate-limits per object and reason (client-go's default
// key has no reason, so a flood of one reason would also silence the others
// on the same pod, such as a refused Allocate), one Event at once, then one
// per eventInterval.
func eventCorrelation(clk clock.PassiveClock) record.CorrelatorOptions {
	return record.CorrelatorOptions{
		BurstSize: 1,
		QPS:       float32(1 / eventInterval.Seconds()),
		Clock:     clk,
		SpamKeyFunc: func(e *v1.Event) string {
			o := e.InvolvedObject
			return strings.Join([]string{e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name, string(o.UID), e.Type, e.Reason}, "\x00")
		},
	}
}
