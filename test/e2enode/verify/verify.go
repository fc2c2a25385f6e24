// Package verify checks what an example container printed (the probe
// image, test/e2enode/probe) against the pod's qGPU assignment: the e2e
// node's verdict, kept apart from the environment so that it is unit-tested.
package verify

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Line is one line of the probe image's output (test/e2enode/probe).
type Line struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Value  string `json:"value"`
	Char   bool   `json:"char"`
	Major  uint32 `json:"major"`
	Minor  uint32 `json:"minor"`
	Target string `json:"target"`
	Root   string `json:"root"`
	RO     bool   `json:"ro"`
}

var cardNode = regexp.MustCompile(`^nvidia[0-9]+$`)

// Container compares what the container printed with the pod's assignment
// annotation: exactly its cards' device nodes (nvidia<index>, major 195) and
// nvidiactl, NVIDIA_VISIBLE_DEVICES = its cards' UUIDs, QGPU_MEMORY_GIB and
// QGPU_CORES = its slices' totals, no mount of a device node or deviceRoot.
// It returns the problems found.
func Container(p *corev1.Pod, container string, lines []Line, deviceRoot string) []string {
	raw := p.Annotations[protocol.AnnotationAssignment]
	a, err := protocol.DecodeAssignment([]byte(raw))
	if err != nil {
		return []string{fmt.Sprintf("assignment annotation %q: %v", raw, err)}
	}
	var slices []protocol.Slice
	for _, c := range a.Containers {
		if c.Name == container {
			slices = c.Slices
		}
	}
	if len(slices) == 0 {
		return []string{"no slices for the container in the assignment " + raw}
	}
	var problems []string
	devs, env := map[string]Line{}, map[string]string{}
	for _, l := range lines {
		switch l.Kind {
		case "dev":
			devs[l.Name] = l
		case "env":
			env[l.Name] = l.Value
		case "mount":
			if strings.HasPrefix(l.Target, "/dev/nvidia") || strings.HasPrefix(l.Target, deviceRoot) {
				problems = append(problems, "unexpected mount "+l.Target)
			}
		case "error":
			problems = append(problems, "probe: "+l.Value)
		}
	}
	want := map[string]bool{"nvidiactl": true}
	var uuids []string
	var mem, cores int64
	for _, s := range slices {
		want["nvidia"+strconv.Itoa(s.Index)] = true
		uuids = append(uuids, s.UUID)
		mem += s.MemoryGiB
		cores += s.Cores
	}
	for name := range want {
		d, ok := devs[name]
		switch {
		case !ok:
			problems = append(problems, "missing /dev/"+name)
		case !d.Char || d.Major != 195:
			problems = append(problems, fmt.Sprintf("/dev/%s is not the driver's character device (char %v, major %d)", name, d.Char, d.Major))
		case name != "nvidiactl" && "nvidia"+strconv.Itoa(int(d.Minor)) != name:
			problems = append(problems, fmt.Sprintf("/dev/%s has minor %d", name, d.Minor))
		}
	}
	for name := range devs {
		if cardNode.MatchString(name) && !want[name] {
			problems = append(problems, "sees another card's /dev/"+name)
		}
	}
	expectEnv := map[string]string{
		"NVIDIA_VISIBLE_DEVICES": strings.Join(uuids, ","),
		"QGPU_MEMORY_GIB":        strconv.FormatInt(mem, 10),
	}
	if holdsCores(p, container) {
		expectEnv["QGPU_CORES"] = strconv.FormatInt(cores, 10)
	}
	for k, v := range expectEnv {
		if env[k] != v {
			problems = append(problems, fmt.Sprintf("%s=%q, want %q", k, env[k], v))
		}
	}
	return problems
}

// holdsCores: the container asks for qgpu-core or qgpu-core-greedy (online
// containers ask for memory only and get no QGPU_CORES).
func holdsCores(p *corev1.Pod, container string) bool {
	for _, c := range p.Spec.Containers {
		if c.Name != container {
			continue
		}
		_, core := c.Resources.Limits[corev1.ResourceName(protocol.ResourceCore)]
		_, greedy := c.Resources.Limits[corev1.ResourceName(protocol.ResourceCoreGreedy)]
		return core || greedy
	}
	return false
}

// ReadLog decodes the probe's lines from a container log in the CRI format
// the kubelet has the runtime write ("<time> stdout F <line>"), up to its
// "done" line; an error when that line is not there (yet).
func ReadLog(path string) ([]Line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []Line
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) < 4 || parts[1] != "stdout" {
			continue
		}
		var l Line
		if err := json.Unmarshal([]byte(parts[3]), &l); err != nil {
			return nil, fmt.Errorf("%s: not a probe line: %q", path, parts[3])
		}
		if l.Kind == "done" {
			return lines, nil
		}
		lines = append(lines, l)
	}
	return nil, fmt.Errorf("%s: no \"done\" line (yet)", path)
}
