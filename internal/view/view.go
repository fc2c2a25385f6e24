// Package view reads a cluster's nodes and pods into per-card usage with the
// scheduler's own ledger, for kubectl-qgpu, the invariant checker and tests.
// It trusts only what the scheduler would: assignments bound to the pod's UID
// and node.
package view

import (
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Cluster is the qGPU state of a cluster at one moment.
type Cluster struct {
	// Nodes are the nodes labelled qgpu-device-enable=enable.
	Nodes []Node
	// Other are the nodes that hold bound qGPU pods but are not labelled
	// (the label was removed under them) or have no Node object (deleted):
	// their cards are checked as far as their capacity is known (unknown.go).
	Other []Node
	// Pods are the qGPU pods, bound or not.
	Pods []Pod
	// Unassigned are bound qGPU pods without an assignment the scheduler made.
	Unassigned []Pod
	ledger     *ledger.Ledger
	// granted counts what the agents really handed out: each pod's grant
	// where it has a valid one, else its assignment (granted.go).
	granted *ledger.Ledger
	// claims are the allocated qGPU ResourceClaims AddClaims counted.
	claims []heldClaim
	// facts are what the Node objects say, by name; a node absent here has
	// no Node object.
	facts map[string]nodeFacts
}

// nodeFacts is what a Node object says about its qGPU cards.
type nodeFacts struct {
	labelled, mixed bool
	// invalid is why its inventory is unusable (missing or malformed).
	invalid string
	cards   []protocol.Card
}

// Node is one qGPU node with its cards' usage.
type Node struct {
	Name    string
	Invalid string
	Mixed   bool
	Cards   []ledger.Card
	// Holders lists, per card index, the pods holding a slice.
	Holders map[int][]string
}

// Pod is a qGPU pod and what it holds.
type Pod struct {
	Namespace, Name string
	UID             types.UID
	Node            string
	Phase           v1.PodPhase
	Class           protocol.Class
	// req is the pod's parsed request; nil when Problem says why not.
	req        *request.Request
	Assignment *protocol.Assignment
	Grant      *protocol.Assignment
	// Claimed: the pod asked through ResourceClaims (docs/dra.md); its
	// request is read back from its assignment.
	Claimed bool
	// claims maps its ResourceClaims to the container using each (CheckClaims).
	claims map[string]string
	// Problem is why the pod's request or annotations are not usable, if so.
	Problem string
}

// Key is namespace/name.
func (p Pod) Key() string { return p.Namespace + "/" + p.Name }

// Build reads nodes and pods; maxPodsPerCard ≤ 0 is memory / 4 per card.
func Build(nodes []v1.Node, pods []v1.Pod, maxPodsPerCard int) *Cluster {
	c := &Cluster{ledger: ledger.New(maxPodsPerCard), granted: ledger.New(maxPodsPerCard), facts: map[string]nodeFacts{}}
	for i := range nodes {
		f := readNode(&nodes[i])
		c.facts[nodes[i].Name] = f
		c.setNode(nodes[i].Name, f)
	}
	for i := range pods {
		c.addPod(&pods[i])
	}
	c.coverUnknown()
	c.snapshot()
	return c
}

// snapshot copies every node's cards and holders out of the ledger.
func (c *Cluster) snapshot() {
	c.Nodes, c.Other = nil, nil
	for name, f := range c.facts {
		if f.labelled {
			c.Nodes = append(c.Nodes, c.node(name))
		}
	}
	for _, name := range c.holdingNodes() {
		if f, ok := c.facts[name]; !ok || !f.labelled {
			c.Other = append(c.Other, c.node(name))
		}
	}
	sort.Slice(c.Nodes, func(i, j int) bool { return c.Nodes[i].Name < c.Nodes[j].Name })
}

func readNode(n *v1.Node) nodeFacts {
	f := nodeFacts{
		labelled: n.Labels[protocol.LabelDeviceEnable] == protocol.LabelValueEnable,
		mixed:    n.Labels[protocol.LabelMixedEnable] == protocol.LabelValueEnable,
	}
	raw, ok := n.Annotations[protocol.AnnotationInventory]
	if !ok {
		f.invalid = "no annotation " + protocol.AnnotationInventory
		return f
	}
	inv, err := protocol.DecodeInventory([]byte(raw))
	if err != nil {
		f.invalid = err.Error()
		return f
	}
	f.cards = inv.Cards
	return f
}

func (c *Cluster) setNode(name string, f nodeFacts) {
	var inv *protocol.Inventory
	if f.invalid == "" {
		inv = &protocol.Inventory{Version: protocol.InventoryVersion, Cards: f.cards}
	}
	c.ledger.SetNode(name, inv, f.invalid, f.mixed)
	c.granted.SetNode(name, inv, f.invalid, f.mixed)
}

func (c *Cluster) addPod(pod *v1.Pod) {
	// A pod the scheduler assigned that asks for nvidia.com/gpu alone was
	// read as HAMi's (the cluster enables HAMi): read it so here too.
	_, assigned := pod.Annotations[protocol.AnnotationAssignment]
	req, err := request.ParseWith(pod, request.Options{HAMiWholeGPU: assigned})
	if req == nil && err == nil && !(assigned && request.UsesClaims(pod)) {
		return
	}
	p := Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Node: pod.Spec.NodeName, Phase: pod.Status.Phase}
	p.Assignment, p.Grant = readAssignments(pod, &p)
	if req == nil && err == nil && p.Assignment != nil {
		// Asked through ResourceClaims (docs/dra.md): the assignment holds the shape.
		req = request.FromAssignment(p.Assignment)
		p.Claimed, p.claims = true, claimNames(pod)
	}
	switch {
	case err != nil:
		p.Problem = err.Error()
	case req != nil:
		p.Class, p.req = req.Class, req
	}
	terminal := p.Phase == v1.PodSucceeded || p.Phase == v1.PodFailed
	if p.Node != "" && !terminal {
		if p.Assignment == nil {
			c.Unassigned = append(c.Unassigned, p)
		} else {
			c.ledger.Observe(pod.UID, holdingOf(p.Node, p.Assignment, nil))
			c.granted.Observe(pod.UID, holdingOf(p.Node, p.Grant, p.Assignment))
		}
	}
	c.Pods = append(c.Pods, p)
}

func readAssignments(pod *v1.Pod, p *Pod) (assignment, grant *protocol.Assignment) {
	read := func(key string) *protocol.Assignment {
		raw, ok := pod.Annotations[key]
		if !ok {
			return nil
		}
		a, err := protocol.DecodeAssignment([]byte(raw))
		if err != nil {
			p.Problem = fmt.Sprintf("annotation %s: %v", key, err)
			return nil
		}
		if types.UID(a.PodUID) != pod.UID || a.Node != pod.Spec.NodeName {
			p.Problem = fmt.Sprintf("annotation %s was not made for this pod", key)
			return nil
		}
		return a
	}
	return read(protocol.AnnotationAssignment), read(protocol.AnnotationGrant)
}

func (c *Cluster) node(name string) Node {
	n, _ := c.ledger.CopyNode(name, nil)
	out := Node{Name: name, Invalid: n.Invalid, Mixed: n.Mixed, Cards: n.Cards, Holders: map[int][]string{}}
	for _, p := range c.Pods {
		if p.Node != name || p.Assignment == nil {
			continue
		}
		if h, ok := c.ledger.Holding(p.UID); !ok || h.Node != name {
			continue
		}
		seen := map[int]bool{}
		for _, ca := range p.Assignment.Containers {
			for _, s := range ca.Slices {
				if !seen[s.Index] {
					out.Holders[s.Index] = append(out.Holders[s.Index], p.Key())
					seen[s.Index] = true
				}
			}
		}
	}
	c.claimHolders(name, out.Holders)
	return out
}
