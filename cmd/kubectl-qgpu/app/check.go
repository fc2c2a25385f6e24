package app

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/qgpu-scheduler/qgpu/internal/view"
)

func newCheckCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "Report every violated invariant (oversubscribed or unknown card, pod without assignment or given other than it asked, grant mismatch)",
		Long: "Report every violated invariant; exits 1 if there is any.\n" +
			"Needs to list nodes and pods in all namespaces.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.source()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			nodes, err := s.nodes(ctx, "")
			if err != nil {
				return err
			}
			pods, err := s.pods(ctx, "", "")
			if err != nil {
				return err
			}
			limit, err := o.limit(cmd, s)
			if err != nil {
				return err
			}
			if n := printCheck(o.streams.Out, view.Build(nodes, pods, limit)); n > 0 {
				return fmt.Errorf("%d invariant(s) violated", n)
			}
			return nil
		},
	}
}

// printCheck prints the notes, the warnings, one line per violation and
// then "violations <n>", and returns n: the command exits non-zero when it
// is not 0. Warnings are not counted (view.Cluster.Warnings says why).
func printCheck(w io.Writer, c *view.Cluster) int {
	v := c.Check()
	for _, p := range c.Swapped() {
		fmt.Fprintf(w, "note: %s runs on a twin's card (identical requests admitted in the other order; card totals are right)\n", p)
	}
	for _, x := range c.Warnings() {
		fmt.Fprintf(w, "warning: %s (not counted: it may have changed after the pod was placed)\n", x)
	}
	for _, x := range v {
		fmt.Fprintln(w, x)
	}
	fmt.Fprintf(w, "violations %d\n", len(v))
	return len(v)
}
