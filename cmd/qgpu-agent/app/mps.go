package app

import (
	"context"
	"fmt"
	"os"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/enforce/mpsd"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
)

// DefaultMPSRoot is shared by the agent and the MPS control daemon; /run is
// a tmpfs on systemd hosts, as MPS shared memory must be.
const DefaultMPSRoot = "/run/qgpu/mps"

// mpsOptions is `qgpu-agent mps-control-daemon`'s command line: its own
// flags and logging, none of the agent's.
type mpsOptions struct {
	root, bin, fakeCards, nodeName string
	logs                           *logsapi.LoggingConfiguration
}

// newMPSCommand is the MPS control daemon of manifests/mps: its own
// DaemonSet, so that agent restarts do not stop MPS (agent/enforce/mpsd).
func newMPSCommand() *cobra.Command {
	o := &mpsOptions{logs: logsapi.NewLoggingConfiguration()}
	cmd := &cobra.Command{
		Use:   "mps-control-daemon",
		Short: "Run one MPS control daemon per card (the mps backend's DaemonSet)",
		Long: `mps-control-daemon sets every card of the node to the EXCLUSIVE_PROCESS
compute mode, runs and supervises nvidia-cuda-mps-control per card with its
pipe and log directories under --mps-root, puts each card's ceiling (the
agent's <root>/<uuid>/ceiling) in force through the control pipe, and marks
each card ready there for the agent's mps backend. On SIGTERM it quits the daemons and sets the
cards back to DEFAULT. docs/backend-mps.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := logsapi.ValidateAndApply(o.logs, nil); err != nil {
				return err
			}
			if !cmd.Flags().Changed("mps-control-bin") && o.fakeCards != "" {
				o.bin = ""
			}
			return o.run(cmd.Context())
		},
	}
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("MPS daemon")
	fs.StringVar(&o.root, "mps-root", DefaultMPSRoot, "host directory shared with the agent (its --mps-root), on a tmpfs")
	fs.StringVar(&o.bin, "mps-control-bin", "nvidia-cuda-mps-control", `the MPS control binary (the NVIDIA container runtime mounts it with the compute capability); with --fake-cards the default is "": no daemon runs and the cards are only marked ready`)
	fs.StringVar(&o.fakeCards, "fake-cards", "", "simulate cards instead of NVML, as the agent's --fake-cards")
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME; seeds the fake cards' UUIDs)")
	logsapi.AddFlags(o.logs, fss.FlagSet("logs"))
	return withOwnHelp(cmd, fss)
}

func (o *mpsOptions) run(ctx context.Context) error {
	logger := klog.Background().WithName("mps-control-daemon")
	var lib gonvml.Interface = gonvml.New()
	var modes mpsd.ComputeModes = nvmlModes{lib: lib}
	if o.fakeCards != "" {
		cards, err := nvml.ParseFakeSpec(o.fakeCards)
		if err != nil {
			return err
		}
		lib, modes = nvml.NewFake(cards, o.nodeName, ""), loggedModes{logger}
	}
	driver, err := nvml.Open(lib)
	if err != nil {
		return err
	}
	defer driver.Close()
	if _, err := mpsd.PrepareShm(o.root); err != nil {
		return err
	}
	var uuids []string
	for _, c := range driver.Cards() {
		uuids = append(uuids, c.UUID)
	}
	d := mpsd.New(o.root, o.bin, modes, logger)
	if o.bin != "" {
		// Each card's daemon in a mount namespace of its own, with the
		// card's shared memory directory at /dev/shm.
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding this binary to run %s: %w", mpsd.ShmExecCommand, err)
		}
		d.Isolate = mpsd.ShmNamespace(self)
	}
	defer d.Stop()
	if err := d.Start(uuids); err != nil {
		return err
	}
	logger.Info("MPS control daemons started", "cards", len(uuids), "root", o.root, "shmPerCard", o.root+"/<uuid>/shm", "simulated", o.bin == "")
	// Cards the agent hands out whole leave MPS and EXCLUSIVE_PROCESS.
	go d.Follow(ctx, uuids, time.Second)
	<-ctx.Done()
	logger.Info("Stopping the MPS control daemons")
	return nil
}

// newMPSShmExecCommand is what mps-control-daemon runs each card's
// nvidia-cuda-mps-control through, in a mount namespace of its own
// (mpsd.ShmNamespace): bind the card's shared memory directory on
// /dev/shm, then become the control binary. Hidden: nobody else runs it,
// and it refuses to run in its parent's mount namespace.
func newMPSShmExecCommand() *cobra.Command {
	return &cobra.Command{
		Use:                mpsd.ShmExecCommand + " <shm dir> <program> [args...]",
		Short:              "Run an MPS control binary with a card's shared memory at /dev/shm (mps-control-daemon runs it)",
		Hidden:             true,
		DisableFlagParsing: true,
		Args:               cobra.MinimumNArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			return mpsd.ExecWithShm(args[0], args[1:])
		},
	}
}

// nvmlModes sets compute modes through NVML, as `nvidia-smi -i <uuid> -c`.
type nvmlModes struct{ lib gonvml.Interface }

func (m nvmlModes) SetExclusiveProcess(uuid string, exclusive bool) error {
	dev, ret := m.lib.DeviceGetHandleByUUID(uuid)
	if ret != gonvml.SUCCESS {
		return fmt.Errorf("NVML device %s: %s", uuid, gonvml.ErrorString(ret))
	}
	mode := gonvml.COMPUTEMODE_DEFAULT
	if exclusive {
		mode = gonvml.COMPUTEMODE_EXCLUSIVE_PROCESS
	}
	if ret := dev.SetComputeMode(mode); ret != gonvml.SUCCESS {
		return fmt.Errorf("NVML set compute mode of %s: %s", uuid, gonvml.ErrorString(ret))
	}
	return nil
}

// loggedModes stands in for NVML on fake cards.
type loggedModes struct{ logger klog.Logger }

func (m loggedModes) SetExclusiveProcess(uuid string, exclusive bool) error {
	m.logger.Info("Simulated compute mode", "card", uuid, "exclusiveProcess", exclusive)
	return nil
}
