package app

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/qgpu-scheduler/qgpu/internal/view"
)

func newPodsCommand(o *options) *cobra.Command {
	var selector string
	var all bool
	cmd := &cobra.Command{
		Use:   "pods",
		Short: "qGPU pods: class, node, cards, slices and the agent's grant",
		Long: "qGPU pods: class, node, cards, slices and the agent's grant.\n" +
			"Lists pods in the namespace only (-n, or the context's), so the right to list pods there is enough;\n" +
			"-A lists every namespace, -o wide also reads the pods' nodes for their card models.",
		Example: "  kubectl qgpu pods -n team-a -o json\n  kubectl qgpu pods -A -l app=infer -o wide\n" +
			"  kubectl qgpu pods -A --sort-by=.nodeName\n  kubectl qgpu pods --node n1 -o name",
		Args: cobra.NoArgs,
	}
	out := addOutputFlags(cmd, "the pods")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector on pods (e.g. -l app=infer)")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list pods of every namespace")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if _, err := labels.Parse(selector); err != nil {
			return fmt.Errorf("--selector: invalid value %q: %w", selector, err)
		}
		if err := out.validate(); err != nil {
			return err
		}
		s, ns, err := o.scope(all)
		if err != nil {
			return err
		}
		pods, err := s.pods(cmd.Context(), ns, selector)
		if err != nil {
			return err
		}
		// A pod's slices come from its own annotations: no node is read.
		list := podSlices(view.Build(nil, pods, 0), view.SuspendedPods(pods), o.node)
		if !out.table() {
			return out.print(o.streams.Out, list, nil)
		}
		if len(list.Items) == 0 {
			if all {
				fmt.Fprintln(o.streams.ErrOut, "No qGPU pods found.")
			} else {
				fmt.Fprintf(o.streams.ErrOut, "No qGPU pods found in %s namespace.\n", ns)
			}
			return nil
		}
		var models map[string]map[int]string
		if out.wide() {
			nodes := sets.New[string]()
			for _, p := range list.Items {
				if p.NodeName != "" {
					nodes.Insert(p.NodeName)
				}
			}
			models = s.cardModels(cmd.Context(), sets.List(nodes))
		}
		return out.print(o.streams.Out, list, func() runtime.Object { return podTable(list, all, models, o.now()) })
	}
	return cmd
}
