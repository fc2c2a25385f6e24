package app

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/qgpu-scheduler/qgpu/agent"
	"github.com/qgpu-scheduler/qgpu/agent/cardspec"
	"github.com/qgpu-scheduler/qgpu/agent/dra"
	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/mpsguard"
	"github.com/qgpu-scheduler/qgpu/agent/priority"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// options is the agent's command line: agent.Config plus what only the
// binary needs (where the client and the cards come from, logging).
type options struct {
	agent.Config
	kubeconfig      string
	fakeCards       string
	fakeHealthFile  string
	metricsAddrFile string
	version         bool
	logs            *logsapi.LoggingConfiguration
	featureGate     featuregate.MutableVersionedFeatureGate
	// What a test build adds (Option).
	extraFlags []namedFlags
	sidecars   []func(*agent.Config) (agent.Sidecar, error)
}

type namedFlags struct {
	section string
	add     func(*pflag.FlagSet)
}

func newOptions() *options {
	o := &options{logs: logsapi.NewLoggingConfiguration(), featureGate: featuregate.NewFeatureGate()}
	// Only the logging gates (contextual logging, the alpha/beta logging
	// options): the agent has no feature gates of its own.
	if err := logsapi.AddFeatureGates(o.featureGate); err != nil {
		panic(fmt.Sprintf("registering the logging feature gates: %v", err))
	}
	return o
}

// flagSets registers every flag, by section, with the names and defaults
// the manifests and tests pass (TestManifestArgsParse).
func (o *options) flagSets() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	o.addNodeFlags(fss.FlagSet("node"))
	o.addEnforcementFlags(fss.FlagSet("enforcement"))
	o.addPriorityFlags(fss.FlagSet("priority"))
	o.addSimulationFlags(fss.FlagSet("simulation (no GPU)"))
	for _, f := range o.extraFlags {
		f.add(fss.FlagSet(f.section))
	}
	logsapi.AddFlags(o.logs, fss.FlagSet("logs"))
	o.featureGate.AddFlag(fss.FlagSet("logs"))
	global := fss.FlagSet("global")
	// Not component-base's verflag: its --version prints a fixed
	// "Kubernetes" and the component-base (Kubernetes) version
	// (verflag.go:102 and :124 of v0.34.10), not "qgpu-agent <version>".
	global.BoolVar(&o.version, "version", false, "print the version and exit")
	globalflag.AddGlobalFlags(global, "qgpu-agent", logs.SkipLoggingConfigurationFlags())
	return fss
}

func (o *options) addNodeFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default $KUBECONFIG, else in-cluster)")
	fs.StringVar(&o.DeviceRoot, "device-root", "/dev", "the host directory holding the cards' device nodes (nvidiaN, nvidiactl, ...) that Allocate passes into containers; with --fake-cards, card N is <device-root>/nvidiaN")
	fs.StringVar(&o.DBFile, "dbfile", "/var/lib/qgpu/meta.db", "the agent's grant store")
	fs.StringVar(&o.DevicePluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory")
	fs.StringVar(&o.PodResourcesSocket, "pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", `the kubelet's PodResources socket ("" to skip)`)
	fs.StringVar(&o.MetricsAddr, "metrics-addr", ":9400", `Prometheus metrics address ("" to disable)`)
	fs.StringVar(&o.metricsAddrFile, "metrics-addr-file", "", "write the metrics address the agent bound (host:port) to this file once it runs")
	fs.DurationVar(&o.HealthInterval, "health-interval", 5*time.Second, "how often card health is queried")
	fs.DurationVar(&o.ReconcileInterval, "reconcile-interval", 30*time.Second, "how often grants are reconciled")
	fs.StringVar(&o.KubeletAPI, "kubelet-api", agent.KubeletAPIDevicePlugins, fmt.Sprintf("how the agent serves the kubelet: %s (device plugins for qgpu-memory, qgpu-core, qgpu-core-greedy) or %s (a DRA kubelet plugin for driver %s with consumable capacity, no device plugins; docs/dra.md)", agent.KubeletAPIDevicePlugins, agent.KubeletAPIDRA, protocol.DRADriver))
	fs.StringVar(&o.KubeletPluginsDir, "kubelet-plugins-dir", dra.DefaultPluginsDir, "the kubelet's plugins directory: the DRA plugin's socket and checkpoint go in its "+protocol.DRADriver+" directory (--kubelet-api=dra)")
	fs.StringVar(&o.KubeletRegistryDir, "kubelet-registry-dir", dra.DefaultRegistryDir, "the kubelet's plugin registration directory (--kubelet-api=dra)")
	fs.StringVar(&o.DRACheckpoint, "dra-checkpoint", "", `the file of the claims the DRA plugin prepared ("": checkpoint.json in its directory under --kubelet-plugins-dir; --kubelet-api=dra)`)
	fs.StringSliceVar(&o.Vocabularies, "vocabularies", nil, "other systems' pod vocabularies to serve (vcuda, t9k, hami), besides those the node's vocabulary.qgpu.io/<name>=enable labels name at start (docs/vocabularies.md)")
}

func (o *options) addEnforcementFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Backend, "backend", enforce.NameEnv, fmt.Sprintf("enforcement backend when the node has no %s label: %v", "qgpu.io/enforcement", enforce.Names))
	fs.StringVar(&o.HAMiLibDir, "hami-lib-dir", "/usr/local/vgpu", "host directory with HAMi-core's libvgpu.so or libvgpu.so.<version>, mounted into containers read-only (hami-core backend)")
	fs.StringVar(&o.HAMiLibName, "hami-lib-name", "", `the library's file name in --hami-lib-dir ("": the newest libvgpu.so.<version>, else libvgpu.so)`)
	fs.StringVar(&o.HAMiLockDir, "hami-lock-dir", "/tmp/vgpulock", "host root of the per-card lock directories: <dir>/<card uuid> is mounted at /tmp/vgpulock in the containers whose first card it is (hami-core backend)")
	fs.StringVar(&o.MPSRoot, "mps-root", DefaultMPSRoot, "host directory the MPS control daemon (qgpu-agent mps-control-daemon) shares with the agent: per-card pipe directories and the shared memory directory, on a tmpfs (mps backend)")
	fs.StringVar(&o.MPSForeignProcessPolicy, "mps-foreign-process-policy", string(mpsguard.PolicyReport), fmt.Sprintf("what to do about a process on an MPS-shared card that is not a client of the card's MPS server (it runs without the MPS limits): %s (a Warning Event and the qgpu_mps_foreign_processes metric) or %s (also delete its pod) (mps backend; docs/backend-mps.md)", mpsguard.PolicyReport, mpsguard.PolicyEvict))
	fs.StringVar(&o.DeviceListStrategy, "device-list-strategy", string(enforce.StrategyCDICRI), fmt.Sprintf("how Allocate answers reach the container runtime: %v (docs/backend-env.md; with --fake-cards the default is envvar)", enforce.Strategies))
	fs.StringVar(&o.CDISpecDir, "cdi-spec-dir", "/var/run/cdi", "where the agent writes its per-container CDI specs (cdi-cri, cdi-annotations); the runtime must read it")
	fs.StringSliceVar(&o.CDINodeSpecDirs, "cdi-node-spec-dirs", []string{"/etc/cdi", "/var/run/cdi"}, "where the cards' CDI devices are looked up: the agent's own spec (--cdi-card-kind), then NVIDIA's (nvidia-ctk cdi generate, the device plugin)")
	fs.StringVar(&o.CardSpec.Kind, "cdi-card-kind", cardspec.DefaultKind, `the kind of the per-card CDI spec the agent writes into --cdi-spec-dir at start, from NVML and the driver root (docs/backend-env.md); "" writes none and relies on NVIDIA's specs`)
	fs.StringVar(&o.CardSpec.DriverRoot, "driver-root", "/", "the NVIDIA driver's root on the host (/run/nvidia/driver under GPU Operator's driver container): host paths in the card spec")
	fs.StringVar(&o.CardSpec.DriverRootCtrPath, "driver-root-ctr-path", "/driver-root", "where the agent's container sees --driver-root (a read-only hostPath volume)")
	fs.StringVar(&o.CardSpec.DevRoot, "dev-root", "", "the host root holding dev/nvidia* (default: --driver-root)")
	fs.StringVar(&o.CardSpec.DevRootCtrPath, "dev-root-ctr-path", "", "where the agent's container sees --dev-root (default: --driver-root-ctr-path)")
	fs.StringVar(&o.CardSpec.HookPath, "cdi-hook-path", "auto", `nvidia-cdi-hook on the host, run by the runtime for the card spec's hooks; "auto": GPU Operator's /usr/local/nvidia/toolkit/nvidia-cdi-hook or the package's /usr/bin/nvidia-cdi-hook, whichever --driver-root-ctr-path holds; "": no hooks`)
}

func (o *options) addPriorityFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.PriorityController, "priority-controller", true, "freeze a card's offline pods while an online pod on it is busy (acts only on cards holding online and offline pods)")
	fs.DurationVar(&o.PriorityPoll, "priority-poll", priority.DefaultPoll, "how often the priority controller reads the online pods' GPU activity")
	fs.DurationVar(&o.PriorityIdle, "priority-idle", priority.DefaultIdle, "how long the online pods of a card must be idle before its offline pods resume")
	fs.StringVar(&o.CgroupRoot, "cgroup-root", "/sys/fs/cgroup", "the host's cgroup mount (the priority controller freezes pods under it)")
	fs.StringVar(&o.KubeletCgroupRoot, "kubelet-cgroup-root", "", "the kubelet's --cgroup-root (\"\" or / for its default), where pod cgroups are")
	fs.StringVar(&o.KubeletCgroupDriver, "kubelet-cgroup-driver", "", "the kubelet's --cgroup-driver: systemd, cgroupfs, or \"\" to try both")
	fs.StringVar(&o.KubeletConfig, "kubelet-config", "", "read cgroupRoot and cgroupDriver from this kubelet configuration file (e.g. /var/lib/kubelet/config.yaml) instead of the two flags above")
	fs.StringVar(&o.HAMiRegionRoot, "hami-region-root", "", "host directory of HAMi-core's per-container shared regions (<pod UID>_<container>/cudevshr.cache) and the containers' ld.so.preload; required by the hami-core backend, which creates the directories; set, offline pods whose GPU containers all have a region are suspended by holding back their kernel launches instead of the freezer")
	fs.StringVar(&o.ProcRoot, "proc-root", "/proc", "the host's proc file system (the priority controller and the mps backend's guard map GPU processes to pods through it)")
}

func (o *options) addSimulationFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.fakeCards, "fake-cards", "", `simulate cards instead of NVML, e.g. "4xT4", "2xA100-80G,1xT4", "2x20480MiB:MyModel"`)
	fs.StringVar(&o.fakeHealthFile, "fake-health-file", "", "with --fake-cards: a file listing unhealthy cards, one index or UUID per line")
}

// complete fills the defaults that depend on other flags, and refuses a
// bad card spec flag (naming it) before anything starts. Simulated nodes
// (fake cards on hollow kubelets) have no NVIDIA CDI spec and usually no
// runtime that reads CDI: they deliver as envvar unless told otherwise.
func (o *options) complete(fs *pflag.FlagSet) error {
	if o.CardSpec.DevRoot == "" {
		o.CardSpec.DevRoot = o.CardSpec.DriverRoot
	}
	if o.CardSpec.DevRootCtrPath == "" {
		o.CardSpec.DevRootCtrPath = o.CardSpec.DriverRootCtrPath
	}
	if o.fakeCards != "" && !fs.Changed("device-list-strategy") {
		o.DeviceListStrategy = string(enforce.StrategyEnvvar)
	}
	if o.CardSpec.Kind != "" {
		return o.CardSpec.Check()
	}
	return nil
}
