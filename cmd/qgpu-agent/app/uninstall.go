package app

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/qgpu-scheduler/qgpu/agent/uninstall"
)

// uninstallOptions is `qgpu-agent uninstall`'s command line: the agent's
// own path flags, with the same defaults, so that the DaemonSet of
// manifests/uninstall passes what the agent's DaemonSet passed.
type uninstallOptions struct {
	cfg        uninstall.Config
	kubeconfig string
	wait       bool
}

// newUninstallCommand removes what the agent wrote on its node (agent/uninstall).
func newUninstallCommand(stdout io.Writer) *cobra.Command {
	o := &uninstallOptions{}
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove what the agent wrote on this node (files and Node annotations), once its qGPU pods are gone",
		Long: `uninstall removes the agent's device-plugin sockets, its CDI spec files,
HAMi-core's per-container region directories and its grant store on the
host, and the qgpu.io/inventory annotation and the xgn taint from its Node.
It refuses while pods that hold qGPU slices run on the node (drain it
first), unless --force. Run it from manifests/uninstall after the agent's
DaemonSets are deleted (docs/install.md#uninstall); it is safe to run again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), stdout)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.cfg.Node, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default $KUBECONFIG, else in-cluster)")
	fs.StringVar(&o.cfg.DBFile, "dbfile", "/var/lib/qgpu/meta.db", "the agent's grant store (its --dbfile)")
	fs.StringVar(&o.cfg.DevicePluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory (the agent's --device-plugin-dir)")
	fs.StringVar(&o.cfg.CDISpecDir, "cdi-spec-dir", "/var/run/cdi", "where the agent wrote its CDI specs (its --cdi-spec-dir)")
	fs.StringVar(&o.cfg.HAMiRegionRoot, "hami-region-root", "", "HAMi-core's region directory (the agent's --hami-region-root), if it had one")
	fs.BoolVar(&o.cfg.Force, "force", false, "remove everything even while qGPU pods run on the node (their containers lose their limits' files)")
	fs.BoolVar(&o.wait, "wait", false, "after a clean run, wait for SIGTERM instead of exiting (a DaemonSet's pod)")
	return cmd
}

func (o *uninstallOptions) run(ctx context.Context, stdout io.Writer) error {
	var err error
	if o.cfg.Client, err = client(o.kubeconfig); err != nil {
		return err
	}
	done, err := uninstall.Run(ctx, o.cfg)
	for _, line := range done {
		fmt.Fprintln(stdout, line)
	}
	if err != nil {
		return fmt.Errorf("uninstall on node %s: %w", o.cfg.Node, err)
	}
	fmt.Fprintf(stdout, "qgpu-agent uninstall: node %s is clean (%d removed)\n", o.cfg.Node, len(done))
	if o.wait {
		<-ctx.Done()
	}
	return nil
}
