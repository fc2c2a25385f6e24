// Package command is the one registry of out-of-tree plugins that the
// qgpu-scheduler binary and the integration tests both use.
package command

import (
	"github.com/spf13/cobra"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"sigs.k8s.io/scheduler-plugins/pkg/capacityscheduling"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling"

	// Registers the qgpu args (kind QGPUArgs) in kube-scheduler's scheme.
	_ "github.com/qgpu-scheduler/qgpu/config/args/v1"
	// Registers scheduler-plugins' args (CoschedulingArgs, ...).
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu"
)

// Options registers QGPU, Coscheduling and CapacityScheduling.
func Options() []app.Option {
	return []app.Option{
		app.WithPlugin(qgpu.Name, qgpu.New),
		app.WithPlugin(coscheduling.Name, coscheduling.New),
		app.WithPlugin(capacityscheduling.Name, capacityscheduling.New),
	}
}

// New returns the qgpu-scheduler command: kube-scheduler with the plugins.
func New() *cobra.Command {
	cmd := app.NewSchedulerCommand(Options()...)
	cmd.Use = "qgpu-scheduler"
	cmd.Short = "kube-scheduler with the qGPU fractional-GPU plugin"
	// Stock kube-scheduler ignores --kubeconfig beside --config and says
	// so; this binary honours it (WithKubeconfig), so its help must too.
	if f := cmd.Flags().Lookup("kubeconfig"); f != nil {
		f.Usage = KubeconfigUsage
	}
	return cmd
}

// KubeconfigUsage is --kubeconfig's help: what WithKubeconfig does.
const KubeconfigUsage = "path to a kubeconfig file with the API server's location and credentials; " +
	"unlike stock kube-scheduler, it (or $KUBECONFIG) is honoured with --config too, " +
	"unless the --config file sets clientConnection.kubeconfig"
