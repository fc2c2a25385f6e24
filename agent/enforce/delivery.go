package enforce

import (
	"fmt"
	"path/filepath"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Strategy is how the Allocate answer reaches the container runtime
// (--device-list-strategy), as NVIDIA's device plugin names them.
type Strategy string

// The strategies. docs/backend-env.md says what each guarantees.
const (
	// StrategyCDICRI answers with CDI device names in the device-plugin
	// API's CDIDevices field (the kubelet passes them to the runtime in the
	// CRI request): the card's from the node's NVIDIA CDI spec, and one of
	// the agent's own per-container spec holding every variable and mount.
	StrategyCDICRI Strategy = "cdi-cri"
	// StrategyCDIAnnotations names the same devices in the
	// cdi.k8s.io/<plugin>_<id> container annotation instead, for runtimes
	// that read only that.
	StrategyCDIAnnotations Strategy = "cdi-annotations"
	// StrategyVolumeMounts lists the cards as mounts under
	// /var/run/nvidia-container-devices (the NVIDIA container runtime's
	// accept-nvidia-visible-devices-as-volume-mounts), the rest as
	// variables and mounts of the answer.
	StrategyVolumeMounts Strategy = "volume-mounts"
	// StrategyEnvvar is everything as the answer's variables and mounts
	// (NVIDIA_VISIBLE_DEVICES for the card): cooperative, the pod's own
	// environment overrides it.
	StrategyEnvvar Strategy = "envvar"
)

// Strategies lists the strategies, the default first.
var Strategies = []Strategy{StrategyCDICRI, StrategyCDIAnnotations, StrategyVolumeMounts, StrategyEnvvar}

// ParseStrategy checks a --device-list-strategy value.
func ParseStrategy(s string) (Strategy, error) {
	for _, v := range Strategies {
		if string(v) == s {
			return v, nil
		}
	}
	names := make([]string, len(Strategies))
	for i, v := range Strategies {
		names[i] = string(v)
	}
	return "", fmt.Errorf("--device-list-strategy %q: must be one of %s", s, strings.Join(names, ", "))
}

// CDI reports whether the strategy delivers through CDI specs.
func (s Strategy) CDI() bool { return s == StrategyCDICRI || s == StrategyCDIAnnotations }

// VolumeMountsRoot is where the NVIDIA container runtime reads the card list
// from mounts under the volume-mounts strategy; each card is /dev/null
// mounted at VolumeMountsRoot/<uuid>.
const VolumeMountsRoot = "/var/run/nvidia-container-devices"

// Delivery turns a backend's answer into what the strategy hands the
// kubelet. It wraps every backend (Options.Delivery); nil keeps the
// backend's answer as it is (envvar).
type Delivery struct {
	Strategy Strategy
	// CDI writes and checks the specs of the CDI strategies.
	CDI *CDISpecs
}

// NewDelivery checks that a CDI strategy has its specs.
func NewDelivery(s Strategy, specs *CDISpecs) (*Delivery, error) {
	if _, err := ParseStrategy(string(s)); err != nil {
		return nil, err
	}
	if s.CDI() && specs == nil {
		return nil, fmt.Errorf("--device-list-strategy %q needs the CDI spec directories", s)
	}
	return &Delivery{Strategy: s, CDI: specs}, nil
}

// Wrap returns b delivering through d (nil: envvar), with each request's
// Edit applied to the variables first.
func (d *Delivery) Wrap(b Backend) Backend {
	return &delivered{inner: b, d: d}
}

// Editing returns b applying each request's Edit: b itself where it is a
// delivering backend already (New's), else b without delivery (envvar).
func Editing(b Backend) Backend {
	if _, ok := b.(*delivered); ok {
		return b
	}
	return &delivered{inner: b}
}

type delivered struct {
	inner Backend
	d     *Delivery
}

// Name implements Backend.
func (b *delivered) Name() string { return b.inner.Name() }

// Allocate implements Backend.
func (b *delivered) Allocate(req Request) (*pluginapi.ContainerAllocateResponse, error) {
	resp, err := b.inner.Allocate(req)
	if err != nil {
		return nil, err
	}
	if req.Edit != nil {
		if resp.Envs == nil {
			resp.Envs = map[string]string{}
		}
		req.Edit(resp.Envs)
	}
	if b.d == nil {
		return resp, nil
	}
	switch b.d.Strategy {
	case StrategyVolumeMounts:
		return volumeMounts(req, resp), nil
	case StrategyCDICRI, StrategyCDIAnnotations:
		return b.d.cdi(req, resp)
	}
	return resp, nil
}

// volumeMounts replaces the card list in NVIDIA_VISIBLE_DEVICES by one
// mount per card: the NVIDIA container runtime, configured to, takes the
// list from the mounts and ignores the variable, which the pod can set.
func volumeMounts(req Request, resp *pluginapi.ContainerAllocateResponse) *pluginapi.ContainerAllocateResponse {
	if req.Resource != protocol.ResourceMemory {
		return resp
	}
	resp.Envs["NVIDIA_VISIBLE_DEVICES"] = VolumeMountsRoot
	for _, s := range req.Slices {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{
			ContainerPath: filepath.Join(VolumeMountsRoot, s.UUID), HostPath: "/dev/null", ReadOnly: true})
	}
	return resp
}

// cdi moves the answer's variables and mounts into the container's own CDI
// spec and answers with its device name and, on the memory answer, the
// cards' devices from the node's NVIDIA spec. The runtime applies CDI edits
// after the container's own environment, so the pod cannot override them.
func (d *Delivery) cdi(req Request, resp *pluginapi.ContainerAllocateResponse) (*pluginapi.ContainerAllocateResponse, error) {
	var names []string
	if req.Resource == protocol.ResourceMemory {
		cards, err := d.CDI.CardDevices(req.Slices)
		if err != nil {
			return nil, err
		}
		names = cards
	}
	own, err := d.CDI.Write(req, resp.Envs, resp.Mounts)
	if err != nil {
		return nil, err
	}
	names = append(names, own)
	out := &pluginapi.ContainerAllocateResponse{Devices: resp.Devices}
	if d.Strategy == StrategyCDIAnnotations {
		ann, err := cdiAnnotations(req, names)
		if err != nil {
			return nil, err
		}
		out.Annotations = ann
		return out, nil
	}
	for _, n := range names {
		out.CdiDevices = append(out.CdiDevices, &pluginapi.CDIDevice{Name: n})
	}
	return out, nil
}
