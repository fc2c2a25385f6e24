// Command qgpu-agent is the qGPU node agent: card discovery, inventory, the
// kubelet device plugins for the qGPU resources, and enforcement.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent"
	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/agent/priority"
	"github.com/qgpu-scheduler/qgpu/internal/version"
)

type flags struct {
	agent.Config
	kubeconfig      string
	fakeCards       string
	fakeHealthFile  string
	metricsAddrFile string
	version         bool
}

func parseFlags(args []string) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("qgpu-agent", flag.ContinueOnError)
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	fs.StringVar(&f.DeviceRoot, "device-root", "/dev", "the host directory holding the cards' device nodes (nvidiaN, nvidiactl, ...) that Allocate passes into containers; with --fake-cards, card N is <device-root>/nvidiaN")
	fs.StringVar(&f.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default $KUBECONFIG, else in-cluster)")
	fs.StringVar(&f.fakeCards, "fake-cards", "", `simulate cards instead of NVML, e.g. "4xT4", "2xA100-80G,1xT4", "2x20480MiB:MyModel"`)
	fs.StringVar(&f.fakeHealthFile, "fake-health-file", "", "with --fake-cards: a file listing unhealthy cards, one index or UUID per line")
	fs.StringVar(&f.FakeActivityFile, "fake-activity-file", "", "with --fake-cards: simulate a process and a cgroup for every granted pod under --cgroup-root and --proc-root (scratch directories), busy or idle as this file says, one \"<namespace>/<pod> busy|idle\" a line (agent/fakeactivity)")
	fs.StringVar(&f.DBFile, "dbfile", "/var/lib/qgpu/meta.db", "the agent's grant store")
	fs.StringVar(&f.DevicePluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory")
	fs.StringVar(&f.PodResourcesSocket, "pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", `the kubelet's PodResources socket ("" to skip)`)
	fs.StringVar(&f.Backend, "backend", enforce.NameEnv, fmt.Sprintf("enforcement backend when the node has no %s label: %v", "qgpu.io/enforcement", enforce.Names))
	fs.StringVar(&f.HAMiLibDir, "hami-lib-dir", "/usr/local/vgpu", "host directory with HAMi-core's libvgpu.so (hami-core backend)")
	fs.StringVar(&f.MPSRoot, "mps-root", "/var/lib/qgpu/mps", "host directory for per-card MPS pipe directories (mps backend)")
	fs.StringVar(&f.MPSControlBin, "mps-control-bin", "nvidia-cuda-mps-control", `MPS control binary the agent runs per card when the mps backend is selected ("" : an operator runs the daemons; with --fake-cards the default is "")`)
	fs.BoolVar(&f.PriorityController, "priority-controller", true, "freeze a card's offline pods while an online pod on it is busy (acts only on cards holding online and offline pods)")
	fs.DurationVar(&f.PriorityPoll, "priority-poll", priority.DefaultPoll, "how often the priority controller reads the online pods' GPU activity")
	fs.DurationVar(&f.PriorityIdle, "priority-idle", priority.DefaultIdle, "how long the online pods of a card must be idle before its offline pods resume")
	fs.StringVar(&f.CgroupRoot, "cgroup-root", "/sys/fs/cgroup", "the host's cgroup mount (the priority controller freezes pods under it)")
	fs.StringVar(&f.KubeletCgroupRoot, "kubelet-cgroup-root", "", "the kubelet's --cgroup-root (\"\" or / for its default), where pod cgroups are")
	fs.StringVar(&f.KubeletCgroupDriver, "kubelet-cgroup-driver", "", "the kubelet's --cgroup-driver: systemd, cgroupfs, or \"\" to try both")
	fs.StringVar(&f.KubeletConfig, "kubelet-config", "", "read cgroupRoot and cgroupDriver from this kubelet configuration file (e.g. /var/lib/kubelet/config.yaml) instead of the two flags above")
	fs.StringVar(&f.HAMiRegionRoot, "hami-region-root", "", "host directory of HAMi-core's per-container shared regions (<pod UID>_<container>/*.cache); set, offline pods whose GPU containers all have a region are suspended by holding back their kernel launches instead of the freezer")
	fs.StringVar(&f.ProcRoot, "proc-root", "/proc", "the host's proc file system (the priority controller maps GPU processes to pods through it)")
	fs.StringVar(&f.MetricsAddr, "metrics-addr", ":9400", `Prometheus metrics address ("" to disable)`)
	fs.StringVar(&f.metricsAddrFile, "metrics-addr-file", "", "write the metrics address the agent bound (host:port) to this file once it runs")
	fs.DurationVar(&f.HealthInterval, "health-interval", 5*time.Second, "how often card health is queried")
	fs.DurationVar(&f.ReconcileInterval, "reconcile-interval", 30*time.Second, "how often grants are reconciled")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	klogFlags.VisitAll(func(kf *flag.Flag) { fs.Var(kf.Value, kf.Name, kf.Usage) })
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// Fake cards have no MPS to run: keep simulated nodes from refusing mps
	// Allocate calls for want of a binary, unless one is named on purpose.
	explicit := false
	fs.Visit(func(fl *flag.Flag) { explicit = explicit || fl.Name == "mps-control-bin" })
	if f.fakeCards != "" && !explicit {
		f.MPSControlBin = ""
	}
	return f, nil
}

// nvmlFor returns the simulated NVML of --fake-cards, or the real library.
func (f *flags) nvmlFor() (gonvml.Interface, error) {
	if f.fakeCards == "" {
		if f.fakeHealthFile != "" {
			return nil, fmt.Errorf("--fake-health-file needs --fake-cards")
		}
		if f.FakeActivityFile != "" {
			return nil, fmt.Errorf("--fake-activity-file needs --fake-cards")
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

func run(args []string, stdout io.Writer) error {
	f, err := parseFlags(args)
	if err != nil {
		return err
	}
	if f.version {
		_, err := fmt.Fprintln(stdout, version.String("qgpu-agent"))
		return err
	}
	if f.NVML, err = f.nvmlFor(); err != nil {
		return err
	}
	if f.Client, err = client(f.kubeconfig); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("qgpu-agent"))
	if f.metricsAddrFile != "" {
		f.Started = func(addr net.Addr) { writeAddr(ctx, f.metricsAddrFile, addr) }
	}
	return agent.Run(ctx, f.Config)
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

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "qgpu-agent:", err)
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
