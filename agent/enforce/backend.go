// Package enforce turns a container's slice into what the kubelet puts into
// the container (environment, mounts): the enforcement backends of
// docs/design.md#enforcement-on-the-node.
// See README.md for what each backend really guarantees.
package enforce

import (
	"fmt"
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Backend names, as given by --backend and the node label protocol.LabelEnforcement.
const (
	NameEnv      = "env"
	NameHAMiCore = "hami-core"
	NameMPS      = "mps"
)

// Names lists the backends this build has.
var Names = []string{NameEnv, NameHAMiCore, NameMPS}

// Request is one Allocate call the agent has matched to a container: the
// resource being allocated and the container's slices from its assignment.
type Request struct {
	Resource  string
	Class     protocol.Class
	Policy    protocol.Policy
	Slices    []protocol.Slice
	PodUID    string
	Namespace string
	Pod       string
	Container string
	// Edit, when set, adjusts the backend's variables before they are
	// delivered (a vocabulary's promises: VocabularyEnv). Every delivery
	// strategy applies it: under CDI the variables move into the
	// container's spec, where an edit made to the answer afterwards would
	// never reach the container.
	Edit func(envs map[string]string)
	// CardSlices lists the slices the node's live containers hold on
	// card uuid, besides this container's (the mps backend's ceiling is
	// the largest of them and this one's).
	CardSlices func(uuid string) ([]protocol.Slice, error)
}

// Backend builds the container's part of the Allocate response for one resource.
// Every qGPU container holds memory, so the memory call carries the card and
// memory settings; the core and core-greedy calls carry the compute settings.
// The kubelet merges the answers of all resources of a container.
type Backend interface {
	Name() string
	Allocate(req Request) (*pluginapi.ContainerAllocateResponse, error)
}

// Options configures the backends that need host paths.
type Options struct {
	// HAMi says where HAMi-core's files are on the host (hami-core).
	HAMi HAMiOptions
	// MPS locates the MPS control daemons (mps); nil means MPSRoot{MPSRoot}.
	MPS MPSControl
	// MPSRoot is the host directory the MPS control daemon DaemonSet
	// shares with the agent (agent/enforce/mpsd).
	MPSRoot string
	// Delivery hands every backend's answer to the runtime
	// (--device-list-strategy); nil is envvar.
	Delivery *Delivery
}

// New returns the backend called name, delivering through opts.Delivery.
func New(name string, opts Options) (Backend, error) {
	b, err := newBackend(name, opts)
	if err != nil {
		return nil, err
	}
	return opts.Delivery.Wrap(b), nil
}

func newBackend(name string, opts Options) (Backend, error) {
	switch name {
	case NameEnv:
		return Env{}, nil
	case NameHAMiCore:
		return NewHAMiCore(opts.HAMi)
	case NameMPS:
		ctl := opts.MPS
		if ctl == nil {
			ctl = MPSRoot{Root: opts.MPSRoot}
		}
		return &MPS{Control: ctl}, nil
	}
	return nil, fmt.Errorf("unknown enforcement backend %q: must be one of %s", name, strings.Join(Names, ", "))
}

// Env is the backend every other one builds on: the card through
// NVIDIA_VISIBLE_DEVICES and the slice as QGPU_* variables, with no hard limit.
type Env struct{}

// Name implements Backend.
func (Env) Name() string { return NameEnv }

// Allocate implements Backend.
func (Env) Allocate(req Request) (*pluginapi.ContainerAllocateResponse, error) {
	if len(req.Slices) == 0 {
		return nil, fmt.Errorf("container %s/%s/%s: no slices", req.Namespace, req.Pod, req.Container)
	}
	return &pluginapi.ContainerAllocateResponse{Envs: envs(req)}, nil
}

// envs returns the QGPU_* variables of the call's resource.
func envs(req Request) map[string]string {
	mem, cores := total(req.Slices)
	switch req.Resource {
	case protocol.ResourceMemory:
		return map[string]string{
			"NVIDIA_VISIBLE_DEVICES": join(req.Slices, func(s protocol.Slice) string { return s.UUID }),
			"QGPU_CARD_INDEX":        join(req.Slices, func(s protocol.Slice) string { return strconv.Itoa(s.Index) }),
			"QGPU_MEMORY_GIB":        strconv.FormatInt(mem, 10),
			"QGPU_CLASS":             string(req.Class),
			"QGPU_POLICY":            string(req.Policy),
		}
	case protocol.ResourceCore, protocol.ResourceCoreGreedy:
		return map[string]string{"QGPU_CORES": strconv.FormatInt(cores, 10)}
	}
	return map[string]string{}
}

func total(slices []protocol.Slice) (memoryGiB, cores int64) {
	return protocol.ContainerAssignment{Slices: slices}.Total()
}

func join(slices []protocol.Slice, f func(protocol.Slice) string) string {
	parts := make([]string, len(slices))
	for i, s := range slices {
		parts[i] = f(s)
	}
	return strings.Join(parts, ",")
}

// exclusive reports whether the container holds whole cards (general C = 100·k):
// no compute limit applies then.
func exclusive(req Request) bool {
	for _, s := range req.Slices {
		if s.Cores < protocol.CoresPerCard {
			return false
		}
	}
	return req.Class == protocol.ClassGeneral
}
