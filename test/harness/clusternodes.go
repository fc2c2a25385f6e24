package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/qgpu-scheduler/qgpu/agent/nvml/fakespec"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// NodeSpec is one simulated qGPU node of a Cluster.
type NodeSpec struct {
	Name string
	// Cards is the agent's --fake-cards spec, e.g. "2xT4" or "1xA100,1xT4".
	Cards string
	// Mixed also labels the node mixed-qgpu-enable=enable (online/offline pods).
	Mixed bool
	// DRA runs the node's agent as a DRA kubelet plugin (--kubelet-api=dra)
	// and its hollow kubelet with the kubelet's DRA manager: the node
	// serves qGPU claims and offers no extended resources (docs/dra.md).
	DRA bool
	// Labels are extra node labels.
	Labels map[string]string
}

// DefaultNodes is the playground's and the e2e tests' cluster: a plain T4
// node, a mixed V100 node for online/offline pods, and a larger A100 node.
const DefaultNodes = "t4-0:2xT4,v100-mixed-0:2xV100:mixed,a100-0:4xA100"

var nodeNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ParseNodes reads a node list such as "t4:2xT4,v100:2xV100:mixed":
// comma-separated entries "[<n>*]<name>:<cards>[:mixed][:dra]", where <cards> is a
// --fake-cards spec with "+" between card groups ("1xA100+1xT4"), and
// "3*t4:2xT4" stands for the nodes t4-0, t4-1 and t4-2.
func ParseNodes(spec string) ([]NodeSpec, error) {
	var nodes []NodeSpec
	seen := map[string]bool{}
	for _, entry := range strings.Split(strings.TrimSpace(spec), ",") {
		got, err := parseNodeEntry(strings.TrimSpace(entry))
		if err != nil {
			return nil, fmt.Errorf("node spec %q: %w", entry, err)
		}
		for _, n := range got {
			if seen[n.Name] {
				return nil, fmt.Errorf("node spec %q: node %s named twice", entry, n.Name)
			}
			seen[n.Name] = true
		}
		nodes = append(nodes, got...)
	}
	return nodes, nil
}

func parseNodeEntry(entry string) ([]NodeSpec, error) {
	parts := strings.Split(entry, ":")
	if len(parts) < 2 || len(parts) > 4 {
		return nil, fmt.Errorf(`want "[<n>*]<name>:<cards>[:mixed][:dra]"`)
	}
	count, name := 1, parts[0]
	if c, n, ok := strings.Cut(name, "*"); ok {
		var err error
		if count, err = strconv.Atoi(c); err != nil || count < 1 || count > 50 {
			return nil, fmt.Errorf("count %q: want 1..50", c)
		}
		name = n
	}
	if !nodeNameRE.MatchString(name) {
		return nil, fmt.Errorf("node name %q: want lower-case letters, digits and '-'", name)
	}
	// The agent validates the cards (and names the models it knows) when
	// it starts; the harness does not link NVML.
	cards := strings.ReplaceAll(parts[1], "+", ",")
	if cards == "" {
		return nil, fmt.Errorf("no cards")
	}
	spec := NodeSpec{Name: name, Cards: cards}
	for _, opt := range parts[2:] {
		switch {
		case opt == "mixed" && !spec.Mixed:
			spec.Mixed = true
		case opt == "dra" && !spec.DRA:
			spec.DRA = true
		default:
			return nil, fmt.Errorf("node option %q: want \"mixed\" or \"dra\", each at most once", opt)
		}
	}
	if count == 1 {
		return []NodeSpec{spec}, nil
	}
	nodes := make([]NodeSpec, count)
	for i := range nodes {
		nodes[i] = spec
		nodes[i].Name = fmt.Sprintf("%s-%d", name, i)
	}
	return nodes, nil
}

// labels returns the node's labels: qgpu-device-enable, mixed-qgpu-enable
// when Mixed, and the extra ones.
func (n NodeSpec) labels() map[string]string {
	l := map[string]string{protocol.LabelDeviceEnable: protocol.LabelValueEnable}
	if n.Mixed {
		l[protocol.LabelMixedEnable] = protocol.LabelValueEnable
	}
	for k, v := range n.Labels {
		l[k] = v
	}
	return l
}

// draAgentArgs are the agent flags of a DRA node whose state is under
// root: the hollow kubelet's plugin directories (its root directory is
// root/kubelet), the claims' CDI specs in root/cdi, and the cards' own
// spec in root/cdi-cards (writeCardSpec: NVIDIA's, as nvidia-ctk writes
// it on a real node; the fake cards have no device nodes for the agent's).
func (n NodeSpec) draAgentArgs(root string) []string {
	if !n.DRA {
		return nil
	}
	return []string{"--kubelet-api=dra",
		"--kubelet-plugins-dir=" + filepath.Join(root, "kubelet", "plugins"),
		"--kubelet-registry-dir=" + filepath.Join(root, "kubelet", "plugins_registry"),
		"--cdi-spec-dir=" + filepath.Join(root, "cdi"), "--cdi-node-spec-dirs=" + filepath.Join(root, "cdi-cards"), "--cdi-card-kind="}
}

// draNodeArgs are the hollow node flags of a DRA node: the kubelet's DRA
// manager, and the specs a claimed container's CDI devices resolve from.
func (n NodeSpec) draNodeArgs(root string) []string {
	if !n.DRA {
		return nil
	}
	return []string{"--dra", "--cdi-spec-dir=" + filepath.Join(root, "cdi"), "--cdi-spec-dir=" + filepath.Join(root, "cdi-cards")}
}

// writeCardSpec writes, for a DRA node, NVIDIA's CDI spec of its fake
// cards into root/cdi-cards: kind nvidia.com/gpu, a device per card named
// by its UUID with its device node (type, major and minor given, so that
// nothing is looked up on the host).
func (n NodeSpec) writeCardSpec(root string) error {
	if !n.DRA {
		return nil
	}
	cards, err := fakespec.Parse(n.Cards)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	spec := &cdispec.Spec{Kind: "nvidia.com/gpu"}
	for i := range cards {
		spec.Devices = append(spec.Devices, cdispec.Device{Name: fakespec.UUID(n.Name, i), ContainerEdits: cdispec.ContainerEdits{
			DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidia" + strconv.Itoa(i), Type: "c", Major: 195, Minor: int64(i)}}}})
	}
	if spec.Version, err = cdi.MinimumRequiredVersion(spec); err != nil {
		return err
	}
	dir := filepath.Join(root, "cdi-cards")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return err
	}
	return cache.WriteSpec(spec, "nvidia.yaml")
}
