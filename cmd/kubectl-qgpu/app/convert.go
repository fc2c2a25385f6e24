package app

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/internal/view"
)

// nodeCards converts the cluster's nodes, labelled and not, to the output
// kind; only is a node name to keep ("" keeps all).
func nodeCards(c *view.Cluster, s view.Suspensions, only string) *NodeCardsList {
	out := &NodeCardsList{TypeMeta: typeMeta("NodeCardsList"), Items: []NodeCards{}}
	for _, n := range append(append([]view.Node(nil), c.Nodes...), c.Other...) {
		if only != "" && n.Name != only {
			continue
		}
		suspended := s.OnCards(c, n.Name)
		item := NodeCards{ObjectMeta: metav1.ObjectMeta{Name: n.Name}, Mixed: n.Mixed, Invalid: n.Invalid, Cards: []Card{}}
		for _, card := range n.Cards {
			item.Cards = append(item.Cards, Card{
				Index: card.Index, UUID: card.UUID, Model: card.Model, Healthy: card.Healthy,
				MemoryGiB: card.MemoryGiB, UsedMemoryGiB: card.UsedMemoryGiB,
				UsedCores: card.UsedCores, UsedCoreGreedy: card.UsedGreedy, MaxPods: card.MaxPods,
				Pods:    PodCounts{General: card.General, Online: card.Online, Offline: card.Offline, Suspended: suspended[card.Index]},
				Holders: n.Holders[card.Index],
			})
		}
		out.Items = append(out.Items, item)
	}
	return out
}

// podSlices converts the cluster's qGPU pods to the output kind; only is a
// node name to keep ("" keeps all).
func podSlices(c *view.Cluster, s view.Suspensions, only string) *PodSlicesList {
	out := &PodSlicesList{TypeMeta: typeMeta("PodSlicesList"), Items: []PodSlices{}}
	for _, p := range c.Pods {
		if only != "" && p.Node != only {
			continue
		}
		item := PodSlices{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID},
			Class:      string(p.Class), NodeName: p.Node, Phase: string(p.Phase),
			Assigned: containers(p.Assignment), Granted: containers(p.Grant), Problem: p.Problem,
		}
		if sus, ok := s[p.UID]; ok {
			// An unreadable annotation still means suspended, since the zero time.
			item.SuspendedSince = &metav1.Time{Time: sus.Since}
		}
		out.Items = append(out.Items, item)
	}
	return out
}

func containers(a *protocol.Assignment) []ContainerSlices {
	if a == nil {
		return nil
	}
	out := make([]ContainerSlices, 0, len(a.Containers))
	for _, c := range a.Containers {
		cs := ContainerSlices{Name: c.Name, Slices: make([]Slice, 0, len(c.Slices))}
		for _, s := range c.Slices {
			cs.Slices = append(cs.Slices, Slice{Card: s.Index, UUID: s.UUID, MemoryGiB: s.MemoryGiB, Cores: s.Cores})
		}
		out = append(out, cs)
	}
	return out
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: kind}
}
