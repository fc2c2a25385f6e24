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

// Where a client container finds its card's MPS daemon: the pipe directory
// and the shared memory the daemon and its clients share.
const (
	MPSContainerPipeDir = "/tmp/nvidia-mps"
	MPSContainerShmDir  = "/dev/shm"
)

// Layout of --mps-root, shared by the control daemon (qgpu-agent
// mps-control-daemon, its own DaemonSet) and the agent:
// <root>/<uuid>/{pipe,log}, <root>/<uuid>/ready while the card's daemon
// answers, and <root>/shm, the tmpfs directory mounted at /dev/shm in the
// daemon and every client.
const (
	MPSReadyFile = "ready"
	MPSShmDir    = "shm"
)

// ErrMPSNotReady: the card's control daemon is not running. A CUDA client
// that cannot reach a daemon runs without MPS, unlimited, so the Allocate
// is refused instead.
var ErrMPSNotReady = errors.New("no MPS control daemon ready for the card")

// MPSControl locates the MPS control daemon of a card.
type MPSControl interface {
	// Dirs returns the card's host pipe directory and the shared memory
	// directory, or ErrMPSNotReady.
	Dirs(uuid string) (pipe, shm string, err error)
}

// MPSRoot finds the daemons the control daemon DaemonSet runs under Root;
// the agent only reads.
type MPSRoot struct {
	Root string
}

// Dirs implements MPSControl.
func (r MPSRoot) Dirs(uuid string) (pipe, shm string, err error) {
	if r.Root == "" {
		return "", "", errors.New("--mps-root is not set")
	}
	card := filepath.Join(r.Root, uuid)
	if _, err := os.Stat(filepath.Join(card, MPSReadyFile)); err != nil {
		return "", "", fmt.Errorf("%w %s: %s is missing (is the qgpu-mps-control-daemon DaemonSet running on this node? docs/backend-mps.md)",
			ErrMPSNotReady, uuid, filepath.Join(card, MPSReadyFile))
	}
	shm = filepath.Join(r.Root, MPSShmDir)
	if fi, err := os.Stat(shm); err != nil || !fi.IsDir() {
		return "", "", fmt.Errorf("%w %s: shared memory directory %s is missing", ErrMPSNotReady, uuid, shm)
	}
	return filepath.Join(card, "pipe"), shm, nil
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
		pipe, shm, err := m.Control.Dirs(s.UUID)
		if err != nil {
			return nil, err
		}
		resp.Envs["CUDA_MPS_PIPE_DIRECTORY"] = MPSContainerPipeDir
		resp.Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=" + strconv.FormatInt(s.MemoryGiB*protocol.GiB, 10) + "M"
		resp.Mounts = []*pluginapi.Mount{
			{ContainerPath: MPSContainerPipeDir, HostPath: pipe},
			{ContainerPath: MPSContainerShmDir, HostPath: shm},
		}
	case protocol.ResourceCore, protocol.ResourceCoreGreedy:
		// MPS has no burst: fixed-share and burst-share both cap; best-effort does not.
		if req.Policy != protocol.PolicyBestEffort {
			resp.Envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.FormatInt(s.Cores, 10)
		}
	}
	return resp, nil
}
