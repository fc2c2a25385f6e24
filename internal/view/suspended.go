package view

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Suspensions are the offline pods that their node's agent shows frozen
// (protocol.AnnotationSuspended): its priority controller holds them while
// an online pod on their card is busy.
type Suspensions map[types.UID]protocol.Suspension

// SuspendedPods reads the annotation of every pod. An unreadable value
// still counts as suspended, with a zero Since.
func SuspendedPods(pods []v1.Pod) Suspensions {
	out := Suspensions{}
	for i := range pods {
		raw, ok := pods[i].Annotations[protocol.AnnotationSuspended]
		if !ok {
			continue
		}
		s, _ := protocol.DecodeSuspension(raw)
		out[pods[i].UID] = s
	}
	return out
}

// OnCards counts the suspended pods of node by the index of the cards
// their assignment places them on.
func (s Suspensions) OnCards(c *Cluster, node string) map[int]int {
	out := map[int]int{}
	for _, p := range c.Pods {
		if _, ok := s[p.UID]; !ok || p.Node != node || p.Assignment == nil {
			continue
		}
		seen := map[int]bool{}
		for _, ca := range p.Assignment.Containers {
			for _, sl := range ca.Slices {
				if !seen[sl.Index] {
					out[sl.Index]++
					seen[sl.Index] = true
				}
			}
		}
	}
	return out
}
