package enforce

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Where a client container finds its card's MPS daemon: the pipe directory
// and the shared memory the card's daemon (its server) and clients share.
const (
	MPSContainerPipeDir = "/tmp/nvidia-mps"
	MPSContainerShmDir  = "/dev/shm"
)

// Layout of --mps-root, shared by the control daemon (qgpu-agent
// mps-control-daemon, its own DaemonSet) and the agent:
// <root>/<uuid>/{pipe,log}, <root>/<uuid>/ready while the card's daemon
// answers, and <root>/<uuid>/shm, the tmpfs directory at /dev/shm in the
// card's daemon (and so its servers) and the card's clients: MPS needs its
// server and clients to share /dev/shm, and tenants of other cards need
// not see it (docs/backend-mps.md#the-shared-memory-directory-one-per-card).
// The agent writes <root>/<uuid>/request: "whole" when it hands the card
// out whole (the daemon quits, the card goes back
// to the DEFAULT compute mode, and <root>/<uuid>/whole says so), "shared"
// (or no file) for slices (EXCLUSIVE_PROCESS and a daemon, as before).
const (
	MPSReadyFile   = "ready"
	MPSShmDir      = "shm"
	MPSRequestFile = "request"
	MPSWholeFile   = "whole"
	// MPSDaemonPIDFile holds the host PID of the card's running control
	// daemon; its servers are its children. The agent tells a card's
	// servers from processes that bypass MPS by it (agent/mpsguard).
	MPSDaemonPIDFile = "daemon.pid"

	MPSRequestWhole  = "whole"
	MPSRequestShared = "shared"
)

// ErrMPSNotReady: the card's control daemon is not running. A CUDA client
// that cannot reach a daemon runs without MPS, unlimited, so the Allocate
// is refused instead.
var ErrMPSNotReady = errors.New("no MPS control daemon ready for the card")

// MPSControl locates the MPS control daemon of a card.
type MPSControl interface {
	// Dirs returns the card's host pipe directory and its shared memory
	// directory, or ErrMPSNotReady.
	Dirs(uuid string) (pipe, shm string, err error)
	// Whole makes the card a plain card: no MPS daemon, the DEFAULT compute
	// mode (under EXCLUSIVE_PROCESS a pod given the whole card could run
	// one CUDA process on it); ErrMPSNotReady when the daemon did not
	// switch in time.
	Whole(uuid string) error
	// Ceil puts the card's daemon-side ceiling in force (mpsceiling.go), or
	// fails naming the card: ErrMPSNotReady when the daemon did not take
	// it in time.
	Ceil(uuid string, c MPSCeiling) error
}

// MPSRoot finds the daemons the control daemon DaemonSet runs under Root,
// and asks it to switch a card between shared and whole through request
// files, waiting up to Wait (DefaultMPSWait) for the switch.
type MPSRoot struct {
	Root string
	Wait time.Duration
}

// DefaultMPSWait bounds how long an Allocate waits for the control daemon
// to switch a card (it looks every second).
const DefaultMPSWait = 10 * time.Second

// request writes the card's request if it says otherwise, and waits until
// done holds.
func (r MPSRoot) request(uuid, want string, done func(card string) bool) error {
	if r.Root == "" {
		return errors.New("--mps-root is not set")
	}
	card := filepath.Join(r.Root, uuid)
	if done(card) {
		return nil
	}
	path := filepath.Join(card, MPSRequestFile)
	if got, err := os.ReadFile(path); err != nil || string(got) != want {
		if err := os.MkdirAll(card, 0o755); err != nil {
			return fmt.Errorf("asking the MPS control daemon for a %s card: %w", want, err)
		}
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			return fmt.Errorf("asking the MPS control daemon for a %s card: %w", want, err)
		}
	}
	limit := r.Wait
	if limit <= 0 {
		limit = DefaultMPSWait
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, limit, false,
		func(context.Context) (bool, error) { return done(card), nil })
	if err != nil {
		return fmt.Errorf("%w %s: asked for a %s card (%s), not switched within %s (clients still on its daemon, or the qgpu-mps-control-daemon DaemonSet not running; docs/backend-mps.md)",
			ErrMPSNotReady, uuid, want, path, limit)
	}
	return nil
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// Whole implements MPSControl.
func (r MPSRoot) Whole(uuid string) error {
	return r.request(uuid, MPSRequestWhole, func(card string) bool { return exists(filepath.Join(card, MPSWholeFile)) })
}

// Dirs implements MPSControl. A card handed out whole before is asked
// back to shared first.
func (r MPSRoot) Dirs(uuid string) (pipe, shm string, err error) {
	if r.Root == "" {
		return "", "", errors.New("--mps-root is not set")
	}
	card := filepath.Join(r.Root, uuid)
	if exists(filepath.Join(card, MPSWholeFile)) || readString(filepath.Join(card, MPSRequestFile)) == MPSRequestWhole {
		if err := r.request(uuid, MPSRequestShared, func(card string) bool { return exists(filepath.Join(card, MPSReadyFile)) }); err != nil {
			return "", "", err
		}
	}
	if _, err := os.Stat(filepath.Join(card, MPSReadyFile)); err != nil {
		return "", "", fmt.Errorf("%w %s: %s is missing (is the qgpu-mps-control-daemon DaemonSet running on this node? docs/backend-mps.md)",
			ErrMPSNotReady, uuid, filepath.Join(card, MPSReadyFile))
	}
	shm = filepath.Join(card, MPSShmDir)
	if fi, err := os.Lstat(shm); err != nil || !fi.IsDir() {
		return "", "", fmt.Errorf("%w %s: shared memory directory %s is missing", ErrMPSNotReady, uuid, shm)
	}
	return filepath.Join(card, "pipe"), shm, nil
}

func readString(path string) string {
	raw, _ := os.ReadFile(path)
	return string(raw)
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
	// Whole cards (general C = 100·k) are exclusive: no MPS client is
	// needed (one MPS pipe directory could not serve several cards'
	// daemons), and the card leaves MPS and EXCLUSIVE_PROCESS, so that the
	// pod can run as many CUDA processes on it as it likes.
	if exclusive(req) || len(req.Slices) != 1 {
		for _, s := range req.Slices {
			if err := m.Control.Whole(s.UUID); err != nil {
				return nil, err
			}
		}
		return resp, nil
	}
	s := req.Slices[0]
	switch req.Resource {
	case protocol.ResourceMemory:
		pipe, shm, err := m.Control.Dirs(s.UUID)
		if err != nil {
			return nil, err
		}
		// The ceiling is in force before the container exists: the
		// daemon's limits bind only clients that connect afterwards.
		if err := m.ceil(req, s); err != nil {
			return nil, err
		}
		resp.Envs["CUDA_MPS_PIPE_DIRECTORY"] = MPSContainerPipeDir
		resp.Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=" + strconv.FormatInt(s.MemoryGiB*protocol.GiB, 10) + "M"
		// Read-only: a client connects to the daemon's sockets and opens
		// the FIFOs its server made there, which a read-only bind mount
		// allows (EROFS is for regular files, directories and links); a
		// writable one would let a root tenant remove the control socket
		// and so take MPS off the card for every tenant on it
		// (docs/backend-mps.md#the-pipe-directory-read-only).
		resp.Mounts = []*pluginapi.Mount{
			{ContainerPath: MPSContainerPipeDir, HostPath: pipe, ReadOnly: true},
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

// ceil raises or lowers the card's ceiling to the largest slice among the
// node's live containers on the card and this one.
func (m *MPS) ceil(req Request, s protocol.Slice) error {
	if req.CardSlices == nil {
		return fmt.Errorf("mps backend: container %s/%s/%s: the slices on card %s are unknown (Request.CardSlices unset), so its MPS ceiling cannot be set",
			req.Namespace, req.Pod, req.Container, s.UUID)
	}
	others, err := req.CardSlices(s.UUID)
	if err != nil {
		return fmt.Errorf("the MPS ceiling of card %s: %w", s.UUID, err)
	}
	c, err := CeilingOf(append(others, s), req.Policy)
	if err != nil {
		return fmt.Errorf("the MPS ceiling of card %s: %w", s.UUID, err)
	}
	return m.Control.Ceil(s.UUID, c)
}
