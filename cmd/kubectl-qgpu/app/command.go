// Package app is kubectl-qgpu's command: a kubectl plugin that shows qGPU
// cards and who holds them (docs/kubectl-qgpu.md). It is a package of its
// own so that the integration tests run it against a real apiserver.
package app

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/logs"

	"github.com/qgpu-scheduler/qgpu/internal/version"
)

// Name is the program's name, as kubectl finds it on PATH.
const Name = "kubectl-qgpu"

// options are the flags every subcommand shares.
type options struct {
	config  *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	// maxPods overrides the scheduler's maxPodsPerCard when set.
	maxPods         int
	schedulerConfig string
	node            string
	now             func() time.Time
	// client connects to the cluster; tests replace it with a fake.
	client func() (kubernetes.Interface, error)
}

// NewCommand is `kubectl qgpu` with its subcommands: nodes, pods, check, quota, version.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	cmd, _ := newCommand(streams)
	return cmd
}

func newCommand(streams genericiooptions.IOStreams) (*cobra.Command, *options) {
	o := &options{config: genericclioptions.NewConfigFlags(true), streams: streams, now: time.Now}
	o.client = o.clientFromFlags
	root := &cobra.Command{
		Use:          Name,
		Short:        "Show qGPU cards, their slices and the pods that hold them",
		SilenceUsage: true,
		Version:      version.Version,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetVersionTemplate(version.String(Name) + "\n")
	o.config.AddFlags(root.PersistentFlags())
	// -v is klog's verbosity, as in every kubectl command (kubectl runs the
	// plugin with the user's flags: `kubectl qgpu nodes -v=6` logs the API
	// calls); with -v taken, cobra gives --version no shorthand.
	logs.AddFlags(root.PersistentFlags())
	root.PersistentFlags().IntVar(&o.maxPods, "max-pods-per-card", 0,
		"DEPRECATED: the limit is read from the scheduler's ConfigMap (--scheduler-config); set only to override it (0: card GiB / 4)")
	root.PersistentFlags().StringVar(&o.schedulerConfig, "scheduler-config", DefaultSchedulerConfig,
		"namespace/name of the ConfigMap holding the scheduler's configuration (key config.yaml), for its maxPodsPerCard")
	root.PersistentFlags().StringVar(&o.node, "node", "", "nodes, pods: show this node only")
	root.AddCommand(newNodesCommand(o), newPodsCommand(o), newCheckCommand(o), newQuotaCommand(o), &cobra.Command{
		Use: "version", Short: "Print the version",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.String(Name))
			return err
		},
	})
	return root, o
}

// clientFromFlags connects to the cluster the kubeconfig flags name.
func (o *options) clientFromFlags() (kubernetes.Interface, error) {
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// scope is the cluster to read and the namespace to list: "" with
// --all-namespaces, else -n or the kubeconfig context's.
func (o *options) scope(all bool) (*source, string, error) {
	ns := ""
	if !all {
		var err error
		if ns, _, err = o.config.ToRawKubeConfigLoader().Namespace(); err != nil {
			return nil, "", err
		}
	}
	s, err := o.source()
	return s, ns, err
}

func (o *options) source() (*source, error) {
	cs, err := o.client()
	if err != nil {
		return nil, err
	}
	return &source{client: cs, warn: o.warn}, nil
}

func (o *options) warn(format string, args ...any) {
	fmt.Fprintf(o.streams.ErrOut, "Warning: "+format+"\n", args...)
}

// limit is the pods-per-card limit: --max-pods-per-card where set, else
// the scheduler's configuration.
func (o *options) limit(cmd *cobra.Command, s *source) (int, error) {
	if cmd.Flags().Changed("max-pods-per-card") {
		if o.maxPods < 0 {
			return 0, fmt.Errorf("--max-pods-per-card: invalid value %d: must be 0 (card GiB / 4) or more", o.maxPods)
		}
		return o.maxPods, nil
	}
	return s.maxPodsPerCard(cmd.Context(), o.schedulerConfig)
}
