package enforce

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// MPSContainerPipeDir is where the container finds its card's MPS pipe directory.
const MPSContainerPipeDir = "/tmp/nvidia-mps"

// MPSControl provides the MPS control daemon of a card.
type MPSControl interface {
	// PipeDir ensures the control daemon of the card runs and returns its host
	// pipe directory.
	PipeDir(uuid string) (string, error)
}

// DirControl only prepares <Root>/<uuid>/pipe.
//
// TODO(mps): start and supervise nvidia-cuda-mps-control -d per card
// (CUDA_VISIBLE_DEVICES=<uuid>, CUDA_MPS_PIPE_DIRECTORY=<dir>) and stop it when
// the card has no pods; until then an operator runs the daemons.
type DirControl struct {
	Root string
}

// PipeDir implements MPSControl.
func (d DirControl) PipeDir(uuid string) (string, error) {
	if d.Root == "" {
		return "", fmt.Errorf("MPS root directory is not set")
	}
	dir := filepath.Join(d.Root, uuid, "pipe")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating MPS pipe directory: %w", err)
	}
	return dir, nil
}

// MPS enforces through NVIDIA MPS: a pinned device memory limit per client and
// an active thread percentage.
type MPS struct {
	Control MPSControl
}

// Name implements Backend.
func (*MPS) Name() string { return NameMPS }

// Allocate implements Backend.
func (m *MPS) Allocate(req Request) (*pluginapi.ContainerAllocateResponse, error) {
	resp, err := Env{}.Allocate(req)
	if err != nil {
		return nil, err
	}
	// Whole cards (general C = 100·k) are exclusive: no MPS client is needed,
	// and one MPS pipe directory could not serve several cards' daemons.
	if exclusive(req) || len(req.Slices) != 1 {
		return resp, nil
	}
	s := req.Slices[0]
	switch req.Resource {
	case protocol.ResourceMemory:
		pipe, err := m.Control.PipeDir(s.UUID)
		if err != nil {
			return nil, fmt.Errorf("card %s: %w", s.UUID, err)
		}
		resp.Envs["CUDA_MPS_PIPE_DIRECTORY"] = MPSContainerPipeDir
		resp.Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=" + strconv.FormatInt(s.MemoryGiB*protocol.GiB, 10) + "M"
		resp.Mounts = []*pluginapi.Mount{{ContainerPath: MPSContainerPipeDir, HostPath: pipe}}
	case protocol.ResourceCore, protocol.ResourceCoreGreedy:
		// MPS has no burst: fixed-share and burst-share both cap; best-effort does not.
		if req.Policy != protocol.PolicyBestEffort {
			resp.Envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.FormatInt(s.Cores, 10)
		}
	}
	return resp, nil
}
