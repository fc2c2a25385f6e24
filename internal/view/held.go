package view

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Held is one slice that a node's agent has on record as handed out (its
// grant store), for CheckHeld.
type Held struct {
	Node      string
	PodUID    types.UID
	Namespace string
	Name      string
	Container string
	Resource  string
}

// CheckHeld reports every slice an agent holds for a pod that is gone,
// terminal, or bound elsewhere: a slice the scheduler has freed
// (docs/design.md#the-protocol-between-scheduler-and-agent:
// a terminal or deleted pod frees its slice at once) but the node still
// counts as taken. held is read from the agents' stores after the cluster
// was read into c; records of pods created since then are not judged.
func (c *Cluster) CheckHeld(held []Held) []Violation {
	pods := make(map[types.UID]Pod, len(c.Pods))
	for _, p := range c.Pods {
		pods[p.UID] = p
	}
	var out []Violation
	for _, h := range held {
		obj := fmt.Sprintf("%s/%s container %s on %s", h.Namespace, h.Name, h.Container, h.Node)
		p, ok := pods[h.PodUID]
		switch {
		case !ok:
			out = append(out, Violation{"StaleGrant", obj, fmt.Sprintf("the agent holds %s for pod UID %s, which no longer exists", h.Resource, h.PodUID)})
		case p.Phase == v1.PodSucceeded || p.Phase == v1.PodFailed:
			out = append(out, Violation{"StaleGrant", obj, fmt.Sprintf("the agent holds %s for a pod in phase %s", h.Resource, p.Phase)})
		case p.Node != h.Node:
			out = append(out, Violation{"StaleGrant", obj, fmt.Sprintf("the agent holds %s for a pod bound to %q", h.Resource, p.Node)})
		}
	}
	return out
}
