package enforce

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// The agent's own CDI kind: one device per (container, resource) answer,
// each in a transient spec file of its own.
const (
	CDIVendor = "qgpu.io"
	CDIClass  = "container"
	// CDICardKind is the kind of the node's NVIDIA spec (nvidia-ctk cdi
	// generate): devices named by NVML index, and by card UUID too from
	// toolkit v1.15 (--device-name-strategy defaults to index and uuid).
	CDICardKind = "nvidia.com/gpu"
	// CDIDevicePluginKind is the kind NVIDIA's device plugin writes under
	// its cdi strategies (GPU Operator nodes carry it): devices named by
	// UUID, or by index with --device-id-strategy=index, and "all".
	CDIDevicePluginKind = "k8s.device-plugin.nvidia.com/gpu"
)

// DefaultCDICardKinds are the kinds a card's device is looked up under,
// the preferred first. GPU Operator's management.nvidia.com/gpu is not
// among them: it holds only "all", every card of the node.
var DefaultCDICardKinds = []string{CDICardKind, CDIDevicePluginKind}

// ErrCDIDeviceMissing: a card has no device in the node's CDI specs; the
// runtime would refuse the container, so the Allocate is refused first.
var ErrCDIDeviceMissing = errors.New("card missing from the node's CDI specs")

// CDISpecs writes the agent's per-container CDI specs into Dir and looks
// the cards up in the node's specs (NodeDirs, e.g. /etc/cdi and
// /var/run/cdi, where nvidia-ctk writes them).
type CDISpecs struct {
	dir      string
	nodeDirs []string
	kinds    []string   // where a card's device is looked up, the preferred first
	own      *cdi.Cache // writes into dir
	node     *cdi.Cache // reads nodeDirs

	mu sync.Mutex
}

// NewCDISpecs checks the directories and opens the caches; dir is created.
// cardKinds are the kinds a card's device is looked up under, the
// preferred first; none is DefaultCDICardKinds.
func NewCDISpecs(dir string, nodeDirs []string, cardKinds ...string) (*CDISpecs, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("--cdi-spec-dir %q must be an absolute path", dir)
	}
	if len(nodeDirs) == 0 {
		return nil, errors.New("--cdi-node-spec-dirs must name at least one directory")
	}
	for _, d := range nodeDirs {
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("--cdi-node-spec-dirs: %q must be an absolute path", d)
		}
	}
	if len(cardKinds) == 0 {
		cardKinds = DefaultCDICardKinds
	}
	for _, k := range cardKinds {
		vendor, class := parser.ParseQualifier(k)
		if err := errors.Join(parser.ValidateVendorName(vendor), parser.ValidateClassName(class)); err != nil || class == "" {
			return nil, fmt.Errorf("CDI card kind %q: must be <vendor>/<class>: %v", k, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating --cdi-spec-dir: %w", err)
	}
	own, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI spec directory %s: %w", dir, err)
	}
	// The node's specs change rarely (driver upgrade): read them again only
	// when a card is not found.
	node, err := cdi.NewCache(cdi.WithSpecDirs(nodeDirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		// Missing directories are not fatal: a card lookup says which.
		node = nil
	}
	return &CDISpecs{dir: dir, nodeDirs: nodeDirs, kinds: slices.Clone(cardKinds), own: own, node: node}, nil
}

// Dir is where the agent writes its specs.
func (c *CDISpecs) Dir() string { return c.dir }

// CardDevices returns the CDI name of each slice's card in the node's
// specs (nvidia.com/gpu=<uuid> where nvidia-ctk wrote it).
func (c *CDISpecs) CardDevices(slices []protocol.Slice) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for _, s := range slices {
		name, tried := c.cardDevice(s)
		if name == "" {
			return nil, fmt.Errorf("%w: none of the CDI devices %s in %s (the agent writes its own card spec at start unless --cdi-card-kind is empty: its log says why it could not; or generate NVIDIA's: nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml; docs/install.md#gpu-operator)",
				ErrCDIDeviceMissing, strings.Join(tried, ", "), strings.Join(c.nodeDirs, ", "))
		}
		names = append(names, name)
	}
	return names, nil
}

// cardDevice finds the card's device under each kind, by UUID first, then
// by NVML index (nvidia-ctk before v1.15, the device plugin with
// --device-id-strategy=index): a UUID names one card whatever happened
// since the spec was written, an index another card once cards were
// replaced. Only a card's own name is looked up, never "all", so no answer
// gives a container every card of the node.
func (c *CDISpecs) cardDevice(s protocol.Slice) (name string, tried []string) {
	for _, id := range []string{s.UUID, strconv.Itoa(s.Index)} {
		for _, kind := range c.kinds {
			vendor, class := parser.ParseQualifier(kind)
			n := parser.QualifiedName(vendor, class, id)
			if c.resolvable(n) {
				return n, nil
			}
			tried = append(tried, n)
		}
	}
	return "", tried
}

// resolvable looks name up, reading the node's specs again once when it is
// not cached (a spec generated after the agent started).
func (c *CDISpecs) resolvable(name string) bool {
	if c.node == nil {
		node, err := cdi.NewCache(cdi.WithSpecDirs(c.nodeDirs...), cdi.WithAutoRefresh(false))
		if err != nil && node == nil {
			return false
		}
		c.node = node
	}
	if c.node.GetDevice(name) != nil {
		return true
	}
	_ = c.node.Refresh() // errors of other specs do not hide this one's device
	return c.node.GetDevice(name) != nil
}

// Write writes the container's spec for req's resource: one device holding
// envs and mounts. It returns the device's qualified name.
func (c *CDISpecs) Write(req Request, envs map[string]string, mounts []*pluginapi.Mount) (string, error) {
	id := CDIDeviceName(req.PodUID, req.Container, req.Resource)
	ann := map[string]string{"qgpu.io/pod": req.Namespace + "/" + req.Pod, "qgpu.io/container": req.Container}
	name, err := c.WriteDevice(CDIVendor+"/"+CDIClass, id, ann, CDIEdits(envs, mounts))
	if err != nil {
		return "", fmt.Errorf("container %s/%s/%s: %w", req.Namespace, req.Pod, req.Container, err)
	}
	return name, nil
}

// WriteDevice writes a transient spec of kind holding the one device id
// with edits into the agent's spec directory (validated, through a
// temporary file and a rename, with the lowest CDI version its content
// needs), and returns the device's qualified name.
func (c *CDISpecs) WriteDevice(kind, id string, annotations map[string]string, edits cdispec.ContainerEdits) (string, error) {
	vendor, class := parser.ParseQualifier(kind)
	if err := parser.ValidateDeviceName(id); err != nil {
		return "", fmt.Errorf("CDI device name: %w", err)
	}
	spec := &cdispec.Spec{
		Kind:        kind,
		Annotations: annotations,
		Devices:     []cdispec.Device{{Name: id, ContainerEdits: edits}},
	}
	version, err := cdi.MinimumRequiredVersion(spec)
	if err != nil {
		return "", fmt.Errorf("CDI spec version: %w", err)
	}
	spec.Version = version
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.own.WriteSpec(spec, transientSpecName(vendor, class, id)); err != nil {
		return "", fmt.Errorf("writing its CDI spec: %w", err)
	}
	return parser.QualifiedName(vendor, class, id), nil
}

// RemoveDevice removes the spec WriteDevice wrote for kind and id; one
// that is not there is no error.
func (c *CDISpecs) RemoveDevice(kind, id string) error {
	vendor, class := parser.ParseQualifier(kind)
	path := filepath.Join(c.dir, transientSpecName(vendor, class, id))
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing CDI spec %s: %w", path, err)
	}
	return nil
}

// HasDevice reports whether the spec WriteDevice writes for kind and id is
// in the agent's spec directory.
func (c *CDISpecs) HasDevice(kind, id string) bool {
	vendor, class := parser.ParseQualifier(kind)
	fi, err := os.Stat(filepath.Join(c.dir, transientSpecName(vendor, class, id)))
	return err == nil && fi.Mode().IsRegular()
}

// CDIDeviceName is the agent's device of one (container, resource):
// <pod UID>_<container>_<resource name without its domain>.
func CDIDeviceName(podUID, container, resource string) string {
	return podUID + "_" + container + "_" + resource[strings.LastIndex(resource, "/")+1:]
}

// cdiAnnotations names the devices in the container annotation of the
// cdi-annotations strategy; the key holds the resource, so the answers of
// one container's resources do not collide when the kubelet merges them.
func cdiAnnotations(req Request, names []string) (map[string]string, error) {
	short := req.Resource[strings.LastIndex(req.Resource, "/")+1:]
	ann, err := cdi.UpdateAnnotations(map[string]string{}, CDIVendor, short, names)
	if err != nil {
		return nil, fmt.Errorf("container %s/%s/%s: %w", req.Namespace, req.Pod, req.Container, err)
	}
	return ann, nil
}

func transientSpecName(vendor, class, id string) string {
	return cdi.GenerateTransientSpecName(vendor, class, id) + ".yaml"
}

// specPrefix starts the file name of every spec the agent writes.
var specPrefix = cdi.GenerateTransientSpecName(CDIVendor, CDIClass, "")

// ParseSpecFileName returns the pod UID of one of the agent's spec files;
// ok is false for any other file.
func ParseSpecFileName(name string) (podUID string, ok bool) {
	rest, found := strings.CutPrefix(name, specPrefix)
	if !found || !strings.HasSuffix(rest, ".yaml") {
		return "", false
	}
	uid, tail, found := strings.Cut(strings.TrimSuffix(rest, ".yaml"), "_")
	if !found || uid == "" || tail == "" || parser.ValidateDeviceName(uid+"_"+tail) != nil {
		return "", false
	}
	return uid, true
}

// Sweep removes the spec files of pods not in keep (a pod on the node or
// holding a grant) once older than grace, at most limit of them; other
// files of the directory are left alone.
func (c *CDISpecs) Sweep(keep map[string]bool, grace time.Duration, now time.Time, limit int) (removed int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return 0, fmt.Errorf("reading --cdi-spec-dir: %w", err)
	}
	var errs []error
	for _, e := range entries {
		uid, ok := ParseSpecFileName(e.Name())
		if !ok || keep[uid] || !e.Type().IsRegular() {
			continue
		}
		if removed >= limit {
			break
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < grace {
			continue
		}
		if err := os.Remove(filepath.Join(c.dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}
