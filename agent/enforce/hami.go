package enforce

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Paths of HAMi-core inside the container, as HAMi's own device plugin uses them.
const (
	HAMiLibName          = "libvgpu.so"
	HAMiContainerLib     = "/usr/local/vgpu/libvgpu.so"
	hamiPreloadName      = "ld.so.preload"
	hamiContainerPreload = "/etc/ld.so.preload"
)

// ErrHAMiLibMissing is returned when libvgpu.so is not on the host.
var ErrHAMiLibMissing = errors.New("HAMi-core library missing on the host")

// HAMiCore enforces memory (hard) and compute (SM utilisation, soft) through
// HAMi-core's libvgpu.so, preloaded into the container.
type HAMiCore struct {
	LibDir string
}

// NewHAMiCore checks that libvgpu.so is in libDir and that ld.so.preload is
// there too (writing it if it is not).
func NewHAMiCore(libDir string) (*HAMiCore, error) {
	h := &HAMiCore{LibDir: libDir}
	if err := h.check(); err != nil {
		return nil, err
	}
	preload := filepath.Join(libDir, hamiPreloadName)
	if _, err := os.Stat(preload); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(preload, []byte(HAMiContainerLib+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", preload, err)
		}
	}
	return h, nil
}

func (h *HAMiCore) check() error {
	if h.LibDir == "" {
		return fmt.Errorf("%w: --hami-lib-dir is not set", ErrHAMiLibMissing)
	}
	lib := filepath.Join(h.LibDir, HAMiLibName)
	if fi, err := os.Stat(lib); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file (install HAMi-core on the node)", ErrHAMiLibMissing, lib)
	}
	return nil
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
		// Checked per call too: the library may have been removed since start,
		// and a container without it would run unlimited.
		if err := h.check(); err != nil {
			return nil, err
		}
		for i, s := range req.Slices {
			// i is the CUDA ordinal inside the container: the order of NVIDIA_VISIBLE_DEVICES.
			resp.Envs["CUDA_DEVICE_MEMORY_LIMIT_"+strconv.Itoa(i)] = strconv.FormatInt(s.MemoryGiB*protocol.GiB, 10) + "m"
		}
		resp.Mounts = []*pluginapi.Mount{
			{ContainerPath: HAMiContainerLib, HostPath: filepath.Join(h.LibDir, HAMiLibName), ReadOnly: true},
			{ContainerPath: hamiContainerPreload, HostPath: filepath.Join(h.LibDir, hamiPreloadName), ReadOnly: true},
		}
	case protocol.ResourceCore, protocol.ResourceCoreGreedy:
		for k, v := range hamiCompute(req) {
			resp.Envs[k] = v
		}
	}
	return resp, nil
}

// hamiCompute maps the policy onto HAMi-core's SM limit: fixed-share is a hard
// cap ("force"), burst-share caps only while the card is shared ("default"),
// best-effort and whole cards have no cap ("disable").
func hamiCompute(req Request) map[string]string {
	_, cores := total(req.Slices[:1])
	if exclusive(req) || req.Policy == protocol.PolicyBestEffort {
		return map[string]string{"GPU_CORE_UTILIZATION_POLICY": "disable"}
	}
	policy := "default"
	if req.Policy == protocol.PolicyFixedShare {
		policy = "force"
	}
	return map[string]string{
		"CUDA_DEVICE_SM_LIMIT":        strconv.FormatInt(cores, 10),
		"GPU_CORE_UTILIZATION_POLICY": policy,
	}
}
