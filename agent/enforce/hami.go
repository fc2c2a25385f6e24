package enforce

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Paths inside the container, as HAMi's device plugin uses them.
const (
	HAMiContainerLib      = "/usr/local/vgpu/libvgpu.so"
	HAMiContainerPreload  = "/etc/ld.so.preload"
	HAMiContainerCacheDir = "/tmp/vgpu"
	HAMiContainerLockDir  = "/tmp/vgpulock"
	// HAMiContainerOverrideEnv is the file HAMi-core reads variables from,
	// over the environment, when its NVML hooks initialise (nvml_preInit,
	// load_env_from_file): an image that ships one could set what the
	// agent's answer set. The agent mounts an empty file there, read-only.
	HAMiContainerOverrideEnv = "/overrideEnv"
	// HAMiPreloadName is the ld.so.preload the agent writes in the region root.
	HAMiPreloadName = "ld.so.preload"
	// HAMiOverrideEnvName is the empty file the agent writes in the region
	// root and mounts at HAMiContainerOverrideEnv.
	HAMiOverrideEnvName = "override-env.empty"
)

// Errors of the hami-core backend.
var (
	ErrHAMiLibMissing = errors.New("HAMi-core library missing on the host")
	ErrHAMiConfig     = errors.New("hami-core backend misconfigured")
)

// HAMiOptions says where HAMi-core's files are on the host; the agent sees
// each at the same path (the DaemonSet mounts them so).
type HAMiOptions struct {
	// LibDir holds libvgpu.so or libvgpu.so.<version> (read-only for the agent).
	LibDir string
	// LibName picks one file of LibDir; "" picks the newest version.
	LibName string
	// RegionRoot holds ld.so.preload and one writable directory per
	// container (<pod UID>_<container>) with its shared region.
	RegionRoot string
	// LockDir holds one lock directory per card, <LockDir>/<uuid>, which
	// the containers whose first card it is share (lockDir).
	LockDir string
}

// HAMiCore enforces memory (hard) and compute (SM utilisation, soft) through
// HAMi-core's libvgpu.so, preloaded into the container through its
// /etc/ld.so.preload. See docs/backend-hami-core.md.
type HAMiCore struct {
	opts HAMiOptions
}

// NewHAMiCore checks the library and prepares the node: the region root
// with ld.so.preload naming the library's path in the container, and the
// root of the cards' lock directories.
func NewHAMiCore(opts HAMiOptions) (*HAMiCore, error) {
	for _, f := range []struct{ flag, v string }{
		{"--hami-lib-dir", opts.LibDir}, {"--hami-region-root", opts.RegionRoot}, {"--hami-lock-dir", opts.LockDir},
	} {
		if f.v == "" || !filepath.IsAbs(f.v) {
			return nil, fmt.Errorf("%w: %s %q must be an absolute path", ErrHAMiConfig, f.flag, f.v)
		}
	}
	h := &HAMiCore{opts: opts}
	if _, err := FindHAMiLib(opts.LibDir, opts.LibName); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.RegionRoot, 0o755); err != nil {
		return nil, fmt.Errorf("hami-core: creating --hami-region-root: %w", err)
	}
	if err := writeFileIfChanged(h.preloadPath(), []byte(HAMiContainerLib+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("hami-core: %w", err)
	}
	if err := writeFileIfChanged(h.overrideEnvPath(), nil, 0o644); err != nil {
		return nil, fmt.Errorf("hami-core: %w", err)
	}
	if err := lockRoot(opts.LockDir); err != nil {
		return nil, fmt.Errorf("hami-core: --hami-lock-dir: %w", err)
	}
	return h, nil
}

func (h *HAMiCore) preloadPath() string { return filepath.Join(h.opts.RegionRoot, HAMiPreloadName) }

func (h *HAMiCore) overrideEnvPath() string {
	return filepath.Join(h.opts.RegionRoot, HAMiOverrideEnvName)
}

// Name implements Backend.
func (*HAMiCore) Name() string { return NameHAMiCore }

// Allocate implements Backend.
func (h *HAMiCore) Allocate(req Request) (*pluginapi.ContainerAllocateResponse, error) {
	resp, err := Env{}.Allocate(req)
	if err != nil {
		return nil, err
	}
	switch req.Resource {
	case protocol.ResourceMemory:
		mounts, err := h.mounts(req)
		if err != nil {
			return nil, err
		}
		resp.Mounts = mounts
		for k, v := range hamiMemory(req.Slices) {
			resp.Envs[k] = v
		}
		resp.Envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = filepath.Join(HAMiContainerCacheDir, hamiregion.FileName)
	case protocol.ResourceCore, protocol.ResourceCoreGreedy:
		for k, v := range hamiCompute(req) {
			resp.Envs[k] = v
		}
	}
	return resp, nil
}

// mounts checks the node again at every memory answer (a container without
// the library, or without a writable region directory, would run unlimited
// or die at its first CUDA call, so the Allocate is refused instead) and
// creates the container's region directory.
func (h *HAMiCore) mounts(req Request) ([]*pluginapi.Mount, error) {
	lib, err := FindHAMiLib(h.opts.LibDir, h.opts.LibName)
	if err != nil {
		return nil, err
	}
	for _, f := range []string{h.preloadPath(), h.overrideEnvPath()} {
		if fi, err := os.Stat(f); err != nil || !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: %s is missing (the agent writes it at start; restart it)", ErrHAMiConfig, f)
		}
	}
	lock, err := h.lockDir(req.Slices)
	if err != nil {
		return nil, fmt.Errorf("container %s/%s/%s: hami-core: --hami-lock-dir: %w", req.Namespace, req.Pod, req.Container, err)
	}
	dir, err := hamiregion.PrepareContainerDir(h.opts.RegionRoot, req.PodUID, req.Container)
	if err != nil {
		return nil, fmt.Errorf("container %s/%s/%s: %w", req.Namespace, req.Pod, req.Container, err)
	}
	return []*pluginapi.Mount{
		{ContainerPath: HAMiContainerLib, HostPath: lib, ReadOnly: true},
		{ContainerPath: HAMiContainerPreload, HostPath: h.preloadPath(), ReadOnly: true},
		{ContainerPath: HAMiContainerCacheDir, HostPath: dir},
		{ContainerPath: HAMiContainerLockDir, HostPath: lock},
		{ContainerPath: HAMiContainerOverrideEnv, HostPath: h.overrideEnvPath(), ReadOnly: true},
	}, nil
}

// lockDir is the container's /tmp/vgpulock: its first card's directory
// under the lock root, created sticky and writable by all (the library
// makes its lock file there as the container's user). HAMi-core builds
// from a8b3d73 until the per-region semaphore of 8f3a89c hold
// /tmp/vgpulock/lock around set_task_pid, which finds the process's host
// PID by diffing NVML's process list of the first card the container
// sees; NVML enumerates a container's cards in index order, so only
// processes whose first card is the same one can confuse each other's
// diff, and they share the directory. A node-wide directory let a tenant
// holding the lock stall every container's first CUDA call on the node
// (docs/backend-hami-core.md#the-lock-directory).
func (h *HAMiCore) lockDir(slices []protocol.Slice) (string, error) {
	first := slices[0]
	for _, s := range slices[1:] {
		if s.Index < first.Index {
			first = s
		}
	}
	if first.UUID == "" || first.UUID != filepath.Base(first.UUID) || first.UUID == "." || first.UUID == ".." {
		return "", fmt.Errorf("card UUID %q cannot name a directory", first.UUID)
	}
	dir := filepath.Join(h.opts.LockDir, first.UUID)
	if err := lockRoot(h.opts.LockDir); err != nil {
		return "", err
	}
	if err := sharedDir(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// HAMi-core reads a limit per card before the plain variable: for every
// ordinal i below CUDA_DEVICE_MAX_COUNT (16) it takes
// CUDA_DEVICE_MEMORY_LIMIT_<i> / CUDA_DEVICE_SM_LIMIT_<i> when set and
// non-zero, else CUDA_DEVICE_MEMORY_LIMIT / CUDA_DEVICE_SM_LIMIT
// (do_init_device_memory_limits and do_init_device_sm_limits in
// multiprocess_memory_limit.c; hamiregion.MaxDevices is the same bound).
// Under CDI delivery the runtime applies the agent's spec after the pod's
// env, and a variable of both gets the agent's value (Delivery.cdi;
// TestCDIDeliveryEnvOverride injects with the CDI library); under envvar
// the kubelet puts the pod's env after the answer's, and the pod's wins
// (TestEnvvarIsCooperative). Either way a name the agent does not set
// keeps the pod's value: a pod setting CUDA_DEVICE_SM_LIMIT_0=100 would
// lift its cap. So the answer sets the per-card form of every ordinal the
// library reads. Ordinals past the
// container's cards name no card it was given; they get its smallest
// slice, so even a card it could see by mistake is capped no higher.
const hamiCardForms = hamiregion.MaxDevices

// hamiMemory is CUDA_DEVICE_MEMORY_LIMIT_<i> for every ordinal HAMi-core
// reads: slice i's memory (i is the CUDA ordinal inside the container, the
// order of NVIDIA_VISIBLE_DEVICES), the smallest slice's past the last card.
func hamiMemory(slices []protocol.Slice) map[string]string {
	smallest := slices[0].MemoryGiB
	for _, s := range slices {
		smallest = min(smallest, s.MemoryGiB)
	}
	out := make(map[string]string, hamiCardForms)
	for i := range hamiCardForms {
		gib := smallest
		if i < len(slices) {
			gib = slices[i].MemoryGiB
		}
		out["CUDA_DEVICE_MEMORY_LIMIT_"+strconv.Itoa(i)] = strconv.FormatInt(gib*protocol.GiB, 10) + "m"
	}
	return out
}

// hamiCompute maps the policy onto HAMi-core's SM limit: fixed-share is a hard
// cap ("force": the region's switch is ignored), burst-share caps only while
// the switch in the container's region is on ("default"; agent/hamicore
// turns it off while the container is alone on its cards), best-effort and
// whole cards have no cap ("disable").
func hamiCompute(req Request) map[string]string {
	_, cores := total(req.Slices[:1])
	if exclusive(req) || req.Policy == protocol.PolicyBestEffort {
		return map[string]string{"GPU_CORE_UTILIZATION_POLICY": "disable"}
	}
	policy := "default"
	if req.Policy == protocol.PolicyFixedShare {
		policy = "force"
	}
	out := map[string]string{
		"CUDA_DEVICE_SM_LIMIT":        strconv.FormatInt(cores, 10),
		"GPU_CORE_UTILIZATION_POLICY": policy,
	}
	for i := range hamiCardForms { // see hamiCardForms: the pod's own per-card value would win
		out[smLimit+"_"+strconv.Itoa(i)] = out[smLimit]
	}
	return out
}
