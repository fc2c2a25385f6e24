package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/agent/cardspec"
	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/mpsguard"
	"github.com/qgpu-scheduler/qgpu/agent/store"
)

// Config is everything the agent needs; cmd/qgpu-agent fills it from flags.
type Config struct {
	NodeName        string
	Client          kubernetes.Interface
	NVML            gonvml.Interface
	DBFile          string
	DevicePluginDir string
	// DeviceRoot is the host directory with the cards' device nodes, passed
	// into containers by Allocate ("" passes none).
	DeviceRoot         string
	PodResourcesSocket string // "" skips the kubelet comparison
	Backend            string
	HAMiLibDir         string
	HAMiLibName        string // "": the newest libvgpu.so.<version> in HAMiLibDir
	HAMiLockDir        string
	MPSRoot            string
	// MPSForeignProcessPolicy is what the agent does about a process on an
	// MPS-shared card that is not a client of the card's MPS server
	// (agent/mpsguard): report ("" too) or evict. MPSForeignProcessPoll
	// is how often it looks (0: every 10 s).
	MPSForeignProcessPolicy string
	MPSForeignProcessPoll   time.Duration
	// DeviceListStrategy is how Allocate answers reach the runtime
	// (enforce.Strategies; "" is envvar). The CDI strategies write the
	// agent's specs into CDISpecDir and find the cards' devices in the
	// node's specs under CDINodeSpecDirs.
	DeviceListStrategy string
	CDISpecDir         string
	CDINodeSpecDirs    []string
	// CardSpec is the per-card CDI spec the agent writes into CDISpecDir
	// at start under a kind of its own, with its NVML (agent/cardspec; Dir
	// and NVML are filled then); its cards are looked up there first. An
	// empty Kind writes none.
	CardSpec          cardspec.Options
	MetricsAddr       string // "" disables metrics and the health probes
	HealthInterval    time.Duration
	ReconcileInterval time.Duration
	// The online/offline priority controller (agent/priority).
	PriorityController         bool
	PriorityPoll, PriorityIdle time.Duration // 0: the controller's defaults
	CgroupRoot                 string
	ProcRoot                   string // "" is /proc
	// KubeletCgroupRoot and KubeletCgroupDriver say where the kubelet puts
	// pod cgroups (its --cgroup-root, --cgroup-driver); KubeletConfig, if
	// set, is read for both instead (agent/cgroup).
	KubeletCgroupRoot, KubeletCgroupDriver, KubeletConfig string
	// HAMiRegionRoot is the host directory of HAMi-core's per-container
	// shared regions (<pod UID>_<container>/cudevshr.cache), which the
	// hami-core backend creates; "" leaves suspension to the freezer
	// (agent/priority, agent/hamiregion) and the hami-core backend refuses.
	HAMiRegionRoot string
	// Sidecars run beside the agent (Sidecar). The production command
	// starts none.
	Sidecars []Sidecar
	// Started, if set, is called once everything runs, with the metrics address.
	Started func(metricsAddr net.Addr)
	// Vocabularies are served on every node besides those its labels enable (vocabularies.go).
	Vocabularies []string
	// KubeletAPI is how the agent serves the kubelet: KubeletAPIDevicePlugins
	// ("" too) or KubeletAPIDRA, a DRA kubelet plugin (dra.go, docs/dra.md),
	// which registers no device plugin. The DRA mode's kubelet directories
	// and the checkpoint of its prepared claims ("": checkpoint.json in the
	// driver's directory under KubeletPluginsDir) follow.
	KubeletAPI                            string
	KubeletPluginsDir, KubeletRegistryDir string
	DRACheckpoint                         string
}

// NodeState is what a Sidecar may read of the running agent.
type NodeState struct {
	Grants func() ([]store.Grant, error) // the store's grant records
	Pods   func() ([]*v1.Pod, error)     // the node's pods, from the informer's cache
}

// A Sidecar is started beside the agent once the pod informer runs and
// before the priority controller, so that what it prepares (a simulated
// cgroup tree) is there when the controller looks. It returns once started
// and runs until ctx ends; an error is logged and the agent runs on. The
// simulated GPU activity of the test binary (test/agentsim) is one.
type Sidecar func(ctx context.Context, node NodeState) error

// Validate checks the configuration before anything starts.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name is required (--node-name or $NODE_NAME)"))
	}
	if c.Client == nil || c.NVML == nil {
		errs = append(errs, errors.New("a client and an NVML interface are required"))
	}
	if !slices.Contains(enforce.Names, c.Backend) {
		errs = append(errs, fmt.Errorf("--backend %q: must be one of %v", c.Backend, enforce.Names))
	}
	if c.DBFile == "" || c.DevicePluginDir == "" {
		errs = append(errs, errors.New("--dbfile and --device-plugin-dir are required"))
	}
	if c.HealthInterval <= 0 || c.ReconcileInterval <= 0 {
		errs = append(errs, errors.New("health and reconcile intervals must be positive"))
	}
	if c.PriorityPoll < 0 || c.PriorityIdle < 0 {
		errs = append(errs, errors.New("--priority-poll and --priority-idle must not be negative"))
	}
	if _, err := mpsguard.ParsePolicy(c.MPSForeignProcessPolicy); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, validateVocabularies(c.Vocabularies)...)
	errs = append(errs, c.validateDRA()...)
	return errors.Join(errs...)
}
