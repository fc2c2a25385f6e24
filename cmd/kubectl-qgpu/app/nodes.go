package app

import (
	"fmt"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/qgpu-scheduler/qgpu/internal/view"
)

// defaultBarWidth is the cells of a --bars bar.
const defaultBarWidth = 10

func newNodesCommand(o *options) *cobra.Command {
	var selector string
	var bars bool
	var barWidth int
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "Cards per node: model, memory and cores used and free, pods",
		Long: "Cards per node: model, memory and cores used and free, pods.\n" +
			"Needs to list nodes and pods in all namespaces, and reads the scheduler's ConfigMap for its pods-per-card limit.",
		Example: "  kubectl qgpu nodes --bars\n  kubectl qgpu nodes -l pool=t4 -o jsonpath='{.items[*].cards[*].usedMemoryGiB}'\n" +
			"  kubectl qgpu nodes --sort-by=.cards[0].usedMemoryGiB --no-headers",
		Args: cobra.NoArgs,
	}
	out := addOutputFlags(cmd, "the nodes (a node's cards stay in index order)")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector on nodes (e.g. -l pool=t4)")
	cmd.Flags().BoolVar(&bars, "bars", false, "show each card's memory and cores fill as a bar")
	cmd.Flags().IntVar(&barWidth, "bar-width", defaultBarWidth, "cells of a --bars bar")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		sel, err := labels.Parse(selector)
		if err != nil {
			return fmt.Errorf("--selector: invalid value %q: %w", selector, err)
		}
		if barWidth < 1 {
			return fmt.Errorf("--bar-width: invalid value %d: must be 1 or more", barWidth)
		}
		if err := out.validate(); err != nil {
			return err
		}
		list, err := o.nodeCards(cmd, sel)
		if err != nil {
			return err
		}
		if len(list.Items) == 0 && out.table() {
			fmt.Fprintln(o.streams.ErrOut, "No qGPU nodes found.")
			return nil
		}
		width := 0
		if bars {
			width = barWidth
		}
		return out.print(o.streams.Out, list, func() runtime.Object { return nodeTable(list, width) })
	}
	return cmd
}

// nodeCards reads every node and every pod: a card's usage counts the
// pods of all namespaces. The selector filters what is shown, not what is
// counted (a node left out must not turn into one without a Node object).
func (o *options) nodeCards(cmd *cobra.Command, sel labels.Selector) (*NodeCardsList, error) {
	r, err := o.readCluster(cmd)
	if err != nil {
		return nil, err
	}
	nodes := r.nodes
	list := nodeCards(r.view, view.SuspendedPods(r.pods), o.node)
	if sel.Empty() {
		return list, nil
	}
	byName := make(map[string]*v1.Node, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	kept := list.Items[:0]
	for _, item := range list.Items {
		if n := byName[item.Name]; n != nil && sel.Matches(labels.Set(n.Labels)) {
			kept = append(kept, item)
		}
	}
	list.Items = kept
	return list, nil
}

// clusterRead is what nodes and check read: every node, every pod (a
// card's usage counts the pods of all namespaces), every ResourceClaim (an
// allocated qGPU claim holds its slices until it is deallocated) and the
// view built from them with the pods-per-card limit.
type clusterRead struct {
	nodes  []v1.Node
	pods   []v1.Pod
	claims []resourceapi.ResourceClaim
	view   *view.Cluster
}

func (o *options) readCluster(cmd *cobra.Command) (*clusterRead, error) {
	s, err := o.source()
	if err != nil {
		return nil, err
	}
	ctx := cmd.Context()
	nodes, err := s.nodes(ctx, "")
	if err != nil {
		return nil, err
	}
	pods, err := s.pods(ctx, "", "")
	if err != nil {
		return nil, err
	}
	limit, err := o.limit(cmd, s)
	if err != nil {
		return nil, err
	}
	r := &clusterRead{nodes: nodes, pods: pods, claims: s.claims(ctx), view: view.Build(nodes, pods, limit)}
	r.view.AddClaims(r.claims)
	return r, nil
}
