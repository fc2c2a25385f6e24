package app

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the apiVersion of what `-o json|yaml|jsonpath` prints.
//
// The output is a typed, versioned object, not a dump of the plugin's
// internals, so that scripts reading it (jq, jsonpath) have a contract: the
// group says it is kubectl-qgpu's view (computed on the client from Nodes and
// Pods, never served by an apiserver), the version says it may still change
// (v1alpha1), and the kinds follow metrics.k8s.io (NodeMetrics, PodMetrics),
// a client-facing view of core objects named apart from them.
var GroupVersion = schema.GroupVersion{Group: "kubectl.qgpu.io", Version: "v1alpha1"}

// NodeCardsList is `kubectl qgpu nodes -o json|yaml`.
type NodeCardsList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []NodeCards `json:"items"`
}

// NodeCards is one qGPU node and the usage of its cards.
type NodeCards struct {
	metav1.ObjectMeta `json:"metadata"`
	// Mixed: labelled for online and offline pods (mixed-qgpu-enable=enable).
	Mixed bool `json:"mixed"`
	// Invalid is why the node has no usable cards (no or a bad inventory,
	// no Node object); its Cards are then what its pods' slices name.
	Invalid string `json:"invalid,omitempty"`
	Cards   []Card `json:"cards"`
}

// Card is one card's capacity and what is held on it, in the units pods
// request (qgpu-memory in GiB, qgpu-core in percent of the card).
type Card struct {
	Index         int    `json:"index"`
	UUID          string `json:"uuid"`
	Model         string `json:"model"`
	Healthy       bool   `json:"healthy"`
	MemoryGiB     int64  `json:"memoryGiB"`
	UsedMemoryGiB int64  `json:"usedMemoryGiB"`
	// UsedCores is the qgpu-core held by general pods, of 100.
	UsedCores int64 `json:"usedCores"`
	// UsedCoreGreedy is the qgpu-core-greedy held by offline pods, of 100.
	UsedCoreGreedy int64 `json:"usedCoreGreedy"`
	// MaxPods is the card's pod limit (the scheduler's maxPodsPerCard).
	MaxPods int       `json:"maxPods"`
	Pods    PodCounts `json:"pods"`
	// Holders are the pods holding a slice, namespace/name.
	Holders []string `json:"holders,omitempty"`
}

// PodCounts counts a card's pods by class, and its suspended offline pods.
type PodCounts struct {
	General   int `json:"general"`
	Online    int `json:"online"`
	Offline   int `json:"offline"`
	Suspended int `json:"suspended"`
}

// PodSlicesList is `kubectl qgpu pods -o json|yaml`.
type PodSlicesList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []PodSlices `json:"items"`
}

// PodSlices is one qGPU pod and the slices it holds.
type PodSlices struct {
	metav1.ObjectMeta `json:"metadata"`
	Class             string `json:"class,omitempty"`
	NodeName          string `json:"nodeName,omitempty"`
	Phase             string `json:"phase,omitempty"`
	// Assigned is what the scheduler placed the pod on; Granted what the
	// node's agent handed out (they differ only by a swap between twins).
	Assigned []ContainerSlices `json:"assigned,omitempty"`
	Granted  []ContainerSlices `json:"granted,omitempty"`
	// SuspendedSince is set while the node's agent holds the (offline) pod
	// frozen for a busy online pod on its card.
	SuspendedSince *metav1.Time `json:"suspendedSince,omitempty"`
	// Problem is why the pod's request or annotations are not usable.
	Problem string `json:"problem,omitempty"`
}

// ContainerSlices is one container's slices.
type ContainerSlices struct {
	Name   string  `json:"name"`
	Slices []Slice `json:"slices"`
}

// Slice is a share of one card.
type Slice struct {
	Card      int    `json:"card"`
	UUID      string `json:"uuid"`
	MemoryGiB int64  `json:"memoryGiB"`
	Cores     int64  `json:"cores"`
}

// Scheme knows the output kinds, for the printers' type setter.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(GroupVersion, &NodeCardsList{}, &PodSlicesList{}, &QuotaUsageList{}, &CheckReport{})
	return s
}()

// DeepCopyObject implements runtime.Object.
func (l *NodeCardsList) DeepCopyObject() runtime.Object {
	out := &NodeCardsList{TypeMeta: l.TypeMeta, Items: make([]NodeCards, len(l.Items))}
	for i, n := range l.Items {
		n.ObjectMeta = *n.ObjectMeta.DeepCopy()
		n.Cards = append([]Card(nil), n.Cards...)
		for j := range n.Cards {
			n.Cards[j].Holders = append([]string(nil), n.Cards[j].Holders...)
		}
		out.Items[i] = n
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *PodSlicesList) DeepCopyObject() runtime.Object {
	out := &PodSlicesList{TypeMeta: l.TypeMeta, Items: make([]PodSlices, len(l.Items))}
	for i, p := range l.Items {
		p.ObjectMeta = *p.ObjectMeta.DeepCopy()
		p.Assigned, p.Granted = copyContainers(p.Assigned), copyContainers(p.Granted)
		if p.SuspendedSince != nil {
			p.SuspendedSince = p.SuspendedSince.DeepCopy()
		}
		out.Items[i] = p
	}
	return out
}

func copyContainers(in []ContainerSlices) []ContainerSlices {
	if in == nil {
		return nil
	}
	out := make([]ContainerSlices, len(in))
	for i, c := range in {
		out[i] = ContainerSlices{Name: c.Name, Slices: append([]Slice(nil), c.Slices...)}
	}
	return out
}

// --sort-by orders a list's items; -o name names the API object each
// stands for: nodes print node/<name>, pods pod/<name>, quota
// namespace/<name> once per namespace, as kubectl get -o name would.
var (
	_ list = &NodeCardsList{}
	_ list = &PodSlicesList{}
	_ list = &QuotaUsageList{}
)

func (l *NodeCardsList) sortBy(field string) error { return sortItems(l.Items, field) }

func (l *NodeCardsList) refs() (string, []string) {
	names := make([]string, 0, len(l.Items))
	for _, n := range l.Items {
		names = append(names, n.Name)
	}
	return "Node", names
}

func (l *PodSlicesList) sortBy(field string) error { return sortItems(l.Items, field) }

func (l *PodSlicesList) refs() (string, []string) {
	names := make([]string, 0, len(l.Items))
	for _, p := range l.Items {
		names = append(names, p.Name)
	}
	return "Pod", names
}

func (l *QuotaUsageList) sortBy(field string) error { return sortItems(l.Items, field) }

func (l *QuotaUsageList) refs() (string, []string) {
	var names []string
	for _, q := range l.Items {
		if !slices.Contains(names, q.Namespace) {
			names = append(names, q.Namespace)
		}
	}
	return "Namespace", names
}
