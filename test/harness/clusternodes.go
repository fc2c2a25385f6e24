package harness

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// NodeSpec is one simulated qGPU node of a Cluster.
type NodeSpec struct {
	Name string
	// Cards is the agent's --fake-cards spec, e.g. "2xT4" or "1xA100,1xT4".
	Cards string
	// Mixed also labels the node mixed-qgpu-enable=enable (online/offline pods).
	Mixed bool
	// Labels are extra node labels.
	Labels map[string]string
}

// DefaultNodes is the playground's and the e2e tests' cluster: a plain T4
// node, a mixed V100 node for online/offline pods, and a larger A100 node.
const DefaultNodes = "t4-0:2xT4,v100-mixed-0:2xV100:mixed,a100-0:4xA100"

var nodeNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ParseNodes reads a node list such as "t4:2xT4,v100:2xV100:mixed":
// comma-separated entries "[<n>*]<name>:<cards>[:mixed]", where <cards> is a
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
	if len(parts) < 2 || len(parts) > 3 {
		return nil, fmt.Errorf(`want "[<n>*]<name>:<cards>[:mixed]"`)
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
	mixed := false
	if len(parts) == 3 {
		if parts[2] != "mixed" {
			return nil, fmt.Errorf("%q: the only node option is \"mixed\"", parts[2])
		}
		mixed = true
	}
	if count == 1 {
		return []NodeSpec{{Name: name, Cards: cards, Mixed: mixed}}, nil
	}
	nodes := make([]NodeSpec, count)
	for i := range nodes {
		nodes[i] = NodeSpec{Name: fmt.Sprintf("%s-%d", name, i), Cards: cards, Mixed: mixed}
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
