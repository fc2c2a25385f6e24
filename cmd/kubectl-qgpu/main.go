// kubectl-qgpu is a kubectl plugin that shows qGPU cards and who holds them:
//
//	kubectl qgpu nodes     cards per node: model, memory and cores used/free, pods
//	kubectl qgpu pods      qGPU pods: class, node, cards, slices, agent grant, suspended
//	kubectl qgpu check     every violated invariant; exits 1 if there is any
//	kubectl qgpu version   the stamped version (also --version)
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/internal/version"
	"github.com/qgpu-scheduler/qgpu/internal/view"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	var allNamespaces bool
	var maxPods int
	var node string
	root := &cobra.Command{
		Use:          "kubectl-qgpu",
		Short:        "Show qGPU cards, their slices and the pods that hold them",
		SilenceUsage: true,
		Version:      version.Version,
	}
	root.SetVersionTemplate(version.String("kubectl-qgpu") + "\n")
	root.AddCommand(&cobra.Command{
		Use: "version", Short: "Print the version",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.String("kubectl-qgpu"))
			return err
		},
	})
	flags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().IntVar(&maxPods, "max-pods-per-card", 0, "the scheduler's maxPodsPerCard (0: card GiB / 4)")
	root.PersistentFlags().StringVar(&node, "node", "", "nodes, pods: show this node only")
	load := func(ctx context.Context) (*listing, error) {
		c, s, err := loadCluster(ctx, flags, maxPods)
		return &listing{Cluster: c, suspended: s, node: node}, err
	}
	root.AddCommand(&cobra.Command{
		Use: "nodes", Short: "Cards per node: model, memory and cores used and free, pods",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := load(cmd.Context())
			if err != nil {
				return err
			}
			return printNodes(cmd.OutOrStdout(), c)
		},
	})
	pods := &cobra.Command{
		Use: "pods", Short: "qGPU pods: class, node, cards, slices and the agent's grant",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := load(cmd.Context())
			if err != nil {
				return err
			}
			ns := ""
			if !allNamespaces {
				if ns, _, err = flags.ToRawKubeConfigLoader().Namespace(); err != nil {
					return err
				}
			}
			return printPods(cmd.OutOrStdout(), c, ns)
		},
	}
	pods.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "list pods of every namespace")
	root.AddCommand(pods)
	root.AddCommand(&cobra.Command{
		Use: "check", Short: "Report every violated invariant (oversubscribed or unknown card, pod without assignment or given other than it asked, grant mismatch)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := load(cmd.Context())
			if err != nil {
				return err
			}
			if n := printCheck(cmd.OutOrStdout(), c.Cluster); n > 0 {
				return fmt.Errorf("%d invariant(s) violated", n)
			}
			return nil
		},
	})
	return root
}

func loadCluster(ctx context.Context, flags *genericclioptions.ConfigFlags, maxPods int) (*view.Cluster, view.Suspensions, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	return view.Build(nodes.Items, pods.Items, maxPods), view.SuspendedPods(pods.Items), nil
}
