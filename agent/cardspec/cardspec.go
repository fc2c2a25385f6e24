// Package cardspec writes the node's per-card CDI spec under a kind the
// agent owns (qgpu.io/gpu by default), as NVIDIA's device plugin writes its
// own: one device per card, named by UUID and by NVML index, holding the
// card's device nodes, and the edits every card needs (control device
// nodes, driver libraries and binaries, the toolkit's hooks) discovered
// under the driver root by the toolkit's pkg/nvcdi. The agent writes it at
// every start, so a node needs no admin step and no other component's spec
// (GPU Operator's toolkit writes only management.nvidia.com/gpu=all, and
// /var/run/cdi is emptied at boot).
//
// Invariants: the file is written whole or not at all (the CDI library's
// WriteSpec: validated, a temporary file renamed over the old one), it
// never holds a device named "all", and every card NVML reports has a
// device, with its device node, under both its names.
package cardspec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform"
	transformroot "github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform/root"
	"k8s.io/klog/v2"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
)

// DefaultKind is the agent's card kind unless --cdi-card-kind says otherwise.
const DefaultKind = "qgpu.io/gpu"

// Options say where the driver is and where the spec goes. Host paths are
// what the runtime reads from the spec; the Ctr paths are where the agent's
// container sees the same directories (equal when the agent runs on the host).
type Options struct {
	Kind string // <vendor>/<class>; "" writes none (the agent's --cdi-card-kind)
	Dir  string // where the spec is written (/var/run/cdi); the agent fills it from --cdi-spec-dir

	DriverRoot        string // the driver's root on the host: "/" or /run/nvidia/driver
	DriverRootCtrPath string
	DevRoot           string // the root holding dev/nvidia* on the host
	DevRootCtrPath    string

	// HookPath is nvidia-cdi-hook on the host; "" leaves the toolkit's
	// hooks out of the spec (nodes without NVIDIA's toolkit: the runtime
	// could not run them and would refuse every container); HookAuto
	// takes the first of HookPaths the driver root holds, else none.
	HookPath string

	NVML nvml.Interface // the agent fills it
}

// HookAuto asks for the hook where NVIDIA's toolkit installs it.
const HookAuto = "auto"

// HookPaths are nvidia-cdi-hook's install paths: GPU Operator's toolkit
// container's, then the distribution packages'.
var HookPaths = []string{"/usr/local/nvidia/toolkit/nvidia-cdi-hook", "/usr/bin/nvidia-cdi-hook"}

// hookPath resolves HookAuto against the driver root as the agent sees it.
func (o Options) hookPath() string {
	if o.HookPath != HookAuto {
		return o.HookPath
	}
	for _, p := range HookPaths {
		if st, err := os.Stat(filepath.Join(o.DriverRootCtrPath, p)); err == nil && st.Mode().IsRegular() {
			return filepath.Join(o.DriverRoot, p)
		}
	}
	return ""
}

// Result is what Write wrote.
type Result struct {
	Path    string
	Devices []string // the spec's device names, UUIDs and indices
}

// Check names the first bad flag among the options (NVML and Dir aside):
// the agent refuses to start with one.
func (o Options) Check() error {
	vendor, class := parser.ParseQualifier(o.Kind)
	if err := errors.Join(parser.ValidateVendorName(vendor), parser.ValidateClassName(class)); err != nil || class == "" {
		return fmt.Errorf("--cdi-card-kind %q: must be <vendor>/<class>: %v", o.Kind, err)
	}
	if o.Kind == enforce.CDIVendor+"/"+enforce.CDIClass {
		return fmt.Errorf("--cdi-card-kind %q: the agent's per-container specs have that kind", o.Kind)
	}
	for _, p := range []struct{ flag, path string }{
		{"--driver-root", o.DriverRoot}, {"--driver-root-ctr-path", o.DriverRootCtrPath},
		{"--dev-root", o.DevRoot}, {"--dev-root-ctr-path", o.DevRootCtrPath},
	} {
		if !filepath.IsAbs(p.path) {
			return fmt.Errorf("%s %q: must be an absolute path", p.flag, p.path)
		}
	}
	if o.HookPath != "" && o.HookPath != HookAuto && !filepath.IsAbs(o.HookPath) {
		return fmt.Errorf("--cdi-hook-path %q: must be an absolute path (or empty: no hooks)", o.HookPath)
	}
	return nil
}

// FileName is the spec's file in Options.Dir: <vendor>-<class>.yaml, the
// name nvidia-ctk and the device plugin give theirs.
func FileName(kind string) string { return strings.ReplaceAll(kind, "/", "-") + ".yaml" }

// cache is the CDI library's view of Dir, through which the spec is
// validated, written whole (a temporary file renamed) and removed.
func (o Options) cache() (*cdi.Cache, error) {
	if !filepath.IsAbs(o.Dir) {
		return nil, fmt.Errorf("--cdi-spec-dir %q: must be an absolute path", o.Dir)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating --cdi-spec-dir: %w", err)
	}
	return cdi.NewCache(cdi.WithSpecDirs(o.Dir), cdi.WithAutoRefresh(false))
}

// Write generates the spec and replaces the old one.
func Write(o Options) (Result, error) {
	if err := o.Check(); err != nil {
		return Result{}, err
	}
	if o.NVML == nil {
		return Result{}, errors.New("cardspec: no NVML")
	}
	cache, err := o.cache()
	if err != nil {
		return Result{}, err
	}
	spec, err := Generate(o)
	if err != nil {
		return Result{}, err
	}
	res := Result{Path: filepath.Join(o.Dir, FileName(o.Kind))}
	for _, d := range spec.Devices {
		res.Devices = append(res.Devices, d.Name)
	}
	if err := cache.WriteSpec(spec, FileName(o.Kind)); err != nil {
		return res, fmt.Errorf("writing the %s spec: %w", o.Kind, err)
	}
	return res, nil
}

// Remove removes the spec a previous Write left, if any.
func Remove(o Options) error {
	cache, err := o.cache()
	if err != nil {
		return err
	}
	if err := cache.RemoveSpec(FileName(o.Kind)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Generate builds the spec with nvcdi from NVML and the driver root seen
// from the agent's container, then rewrites the paths to the host's.
func Generate(o Options) (*cdispec.Spec, error) {
	vendor, class := parser.ParseQualifier(o.Kind)
	uuid, err := nvcdi.NewDeviceNamer(nvcdi.DeviceNameStrategyUUID)
	if err != nil {
		return nil, err
	}
	index, err := nvcdi.NewDeviceNamer(nvcdi.DeviceNameStrategyIndex)
	if err != nil {
		return nil, err
	}
	opts := []nvcdi.Option{
		nvcdi.WithLogger(klogger{}),
		nvcdi.WithMode(nvcdi.ModeNvml),
		nvcdi.WithNvmlLib(o.NVML),
		nvcdi.WithDriverRoot(o.DriverRootCtrPath),
		nvcdi.WithDevRoot(o.DevRootCtrPath),
		nvcdi.WithVendor(vendor),
		nvcdi.WithClass(class),
		nvcdi.WithDeviceNamers(uuid, index),
	}
	if hook := o.hookPath(); hook == "" {
		opts = append(opts, nvcdi.WithDisabledHook(nvcdi.AllHooks))
	} else {
		opts = append(opts, nvcdi.WithNVIDIACDIHookPath(hook))
	}
	lib, err := nvcdi.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("the %s spec: %w", o.Kind, err)
	}
	// GetSpec is nvidia-ctk cdi generate's own path (common edits,
	// deduplication, simplification); its merged device "all" is dropped:
	// no container of the agent's is ever given every card.
	generated, err := lib.GetSpec()
	if err != nil {
		return nil, fmt.Errorf("the %s spec: %w", o.Kind, err)
	}
	spec := generated.Raw()
	spec.Devices = slices.DeleteFunc(spec.Devices, func(d cdispec.Device) bool { return d.Name == "all" })
	if len(spec.Devices) == 0 {
		return nil, fmt.Errorf("the %s spec: no card has a device node under --dev-root-ctr-path %s", o.Kind, o.DevRootCtrPath)
	}
	for _, d := range spec.Devices {
		if len(d.ContainerEdits.DeviceNodes) == 0 {
			return nil, fmt.Errorf("the %s spec: card %s has no device node under --dev-root-ctr-path %s (dev/nvidia<minor>)", o.Kind, d.Name, o.DevRootCtrPath)
		}
	}
	var t transform.Transformer = transformroot.NewDriverTransformer(
		transformroot.WithDriverRoot(o.DriverRootCtrPath), transformroot.WithTargetDriverRoot(o.DriverRoot),
		transformroot.WithDevRoot(o.DevRootCtrPath), transformroot.WithTargetDevRoot(o.DevRoot))
	if err := t.Transform(spec); err != nil {
		return nil, fmt.Errorf("the %s spec: host paths: %w", o.Kind, err)
	}
	version, err := cdi.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("the %s spec: %w", o.Kind, err)
	}
	spec.Version = version
	return spec, nil
}

// klogger is nvcdi's logger: its discovery warnings (a library or device
// node the driver root lacks) at verbosity 4, the rest as klog does.
type klogger struct{}

func (klogger) Debugf(f string, a ...any)   { klog.V(5).Infof(f, a...) }
func (klogger) Tracef(f string, a ...any)   { klog.V(6).Infof(f, a...) }
func (klogger) Info(a ...any)               { klog.V(4).Info(a...) }
func (klogger) Infof(f string, a ...any)    { klog.V(4).Infof(f, a...) }
func (klogger) Warning(a ...any)            { klog.V(4).Info(a...) }
func (klogger) Warningf(f string, a ...any) { klog.V(4).Infof(f, a...) }
func (klogger) Errorf(f string, a ...any)   { klog.Errorf(f, a...) }
