// Package app is the qgpu-agent command line: cmd/qgpu-agent runs it as
// shipped; a test build (test/agentsim) adds flags and sidecars through
// Options, so that nothing the production binary links can simulate a node.
package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/component-base/term"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/internal/version"
)

// nvmlFor returns the simulated NVML of --fake-cards, or the real library.
func (f *options) nvmlFor() (gonvml.Interface, error) {
	if f.fakeCards == "" {
		if f.fakeHealthFile != "" {
			return nil, fmt.Errorf("--fake-health-file needs --fake-cards")
		}
		return gonvml.New(), nil
	}
	cards, err := nvml.ParseFakeSpec(f.fakeCards)
	if err != nil {
		return nil, err
	}
	return nvml.NewFake(cards, f.NodeName, f.fakeHealthFile), nil
}

func client(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.UserAgent = "qgpu-agent"
	// client-go's default (5 QPS, burst 10) cannot keep up with one grant
	// patch per admitted pod in a burst: the writes queue for seconds, and
	// with them the reconciler's pass (found by make chaos).
	cfg.QPS, cfg.Burst = 50, 100
	return kubernetes.NewForConfig(cfg)
}

// Option adds to the command: a section of flags, a sidecar.
type Option func(*options)

// WithFlags adds a section of flags to the command line.
func WithFlags(section string, add func(*pflag.FlagSet)) Option {
	return func(o *options) { o.extraFlags = append(o.extraFlags, namedFlags{section, add}) }
}

// WithSidecar adds a sidecar to the agent (agent.Sidecar). build is called
// with the configuration once the flags are parsed and NVML is chosen; it
// returns nil for none, or an error that stops the agent before it starts.
func WithSidecar(build func(cfg *agent.Config) (agent.Sidecar, error)) Option {
	return func(o *options) { o.sidecars = append(o.sidecars, build) }
}

// NewCommand returns the agent's command line on component-base: sectioned
// flags, --version, the logging flags (--logging-format=json, -v) and
// the logging feature gates, as kube-scheduler has them.
func NewCommand(stdout io.Writer, opts ...Option) *cobra.Command {
	o := newOptions()
	for _, opt := range opts {
		opt(o)
	}
	return newCommand(o, stdout)
}

func newCommand(o *options, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "qgpu-agent",
		Short: "The qGPU node agent",
		Long: `qgpu-agent discovers the node's cards (NVML, or --fake-cards), publishes
their inventory on the Node, serves the kubelet device plugins of the qGPU
resources and hands each container the slice the scheduler assigned it
through an enforcement backend.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected arguments: %v", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.version {
				_, err := fmt.Fprintln(stdout, version.String("qgpu-agent"))
				return err
			}
			if err := logsapi.ValidateAndApply(o.logs, o.featureGate); err != nil {
				return err
			}
			if err := o.complete(cmd.Flags()); err != nil {
				return err
			}
			err := o.run(cmd.Context())
			if err != nil {
				// In the configured format (JSON for log collectors); main
				// also prints the plain last words.
				klog.Background().Error(err, "The agent failed")
			}
			return err
		},
	}
	fss := o.flagSets()
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	uninstall := newUninstallCommand(stdout)
	var ufss cliflag.NamedFlagSets
	ufss.FlagSet("uninstall").AddFlagSet(uninstall.Flags())
	cmd.AddCommand(newMPSCommand(), newMPSShmExecCommand(), withOwnHelp(uninstall, ufss))
	return cmd
}

// withOwnHelp adds the subcommand's flag sections and makes its --help
// and usage list them: cobra hands a subcommand its parent's help function,
// which would list the agent's flags (TestSubcommandsOwnFlags), while a
// subcommand parses only its own. A global section holds --help.
func withOwnHelp(cmd *cobra.Command, fss cliflag.NamedFlagSets) *cobra.Command {
	fss.FlagSet("global").BoolP("help", "h", false, "help for "+cmd.Name())
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}

func (o *options) run(ctx context.Context) error {
	var err error
	if o.NVML, err = o.nvmlFor(); err != nil {
		return err
	}
	if o.Client, err = client(o.kubeconfig); err != nil {
		return err
	}
	for _, build := range o.sidecars {
		sidecar, err := build(&o.Config)
		if err != nil {
			return err
		}
		if sidecar != nil {
			o.Sidecars = append(o.Sidecars, sidecar)
		}
	}
	ctx = klog.NewContext(ctx, klog.Background().WithName("qgpu-agent"))
	if o.metricsAddrFile != "" {
		o.Started = func(addr net.Addr) { writeAddr(ctx, o.metricsAddrFile, addr) }
	}
	return agent.Run(ctx, o.Config)
}

// writeAddr writes the bound metrics address for tools (the playground)
// that started the agent on port 0.
func writeAddr(ctx context.Context, path string, addr net.Addr) {
	if addr == nil {
		return
	}
	tmp := path + ".tmp"
	err := os.WriteFile(tmp, []byte(addr.String()+"\n"), 0o644)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Writing the metrics address", "file", path)
	}
}

// Main runs the command until SIGTERM or SIGINT and exits with 1 on failure.
func Main(opts ...Option) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	cmd := NewCommand(os.Stdout, opts...)
	cmd.SetContext(ctx)
	err := cli.RunNoErrOutput(cmd)
	stop()
	if err != nil {
		// The last line on failure, whatever the log format: the test
		// harness (test/harness) reports an agent that exited by it.
		fmt.Fprintln(os.Stderr, "qgpu-agent:", err)
		os.Exit(1)
	}
}
