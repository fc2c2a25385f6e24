package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/qgpu-scheduler/qgpu/agent/cardspec"
)

// specSummary is what a CDI spec gives a container, in comparable form:
// each device's nodes, and every edit of the spec (common and per device).
type specSummary struct {
	devices map[string][]string // device name → its device nodes' paths
	nodes   []string            // every device node path
	mounts  []string            // "host path -> container path"
	hooks   []string            // "hookName args…" (args without the program's own name)
	hookBin []string            // the hooks' programs
	env     []string
}

func summarize(s *cdispec.Spec) specSummary {
	sum := specSummary{devices: map[string][]string{}}
	add := func(e cdispec.ContainerEdits) []string {
		var nodes []string
		for _, n := range e.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
		for _, m := range e.Mounts {
			sum.mounts = append(sum.mounts, m.HostPath+" -> "+m.ContainerPath)
		}
		for _, h := range e.Hooks {
			args := h.Args
			if len(args) > 0 {
				args = args[1:]
			}
			sum.hooks = append(sum.hooks, strings.TrimSpace(h.HookName+" "+strings.Join(args, " ")))
			sum.hookBin = append(sum.hookBin, h.Path)
		}
		sum.env = append(sum.env, e.Env...)
		sum.nodes = append(sum.nodes, nodes...)
		return nodes
	}
	add(s.ContainerEdits)
	for _, d := range s.Devices {
		nodes := add(d.ContainerEdits)
		slices.Sort(nodes)
		sum.devices[d.Name] = nodes
	}
	for _, l := range []*[]string{&sum.nodes, &sum.mounts, &sum.hooks, &sum.hookBin, &sum.env} {
		slices.Sort(*l)
		*l = slices.Compact(*l)
	}
	return sum
}

// minus is what a holds and b does not.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// compareSpecs: the agent's card spec against NVIDIA's (nvidia-ctk cdi
// generate) on the same node. A card device NVIDIA names must have the
// same device nodes in the agent's spec when the agent names it too (the
// naming strategies may differ: NVIDIA's "all" is never the agent's), and
// the specs must mount the same driver files and create the same device
// nodes. Hooks and variables differ with the toolkit's version and
// configuration: they are noted, not failed.
func compareSpecs(ours, theirs specSummary) (problems, notes []string) {
	for name, nodes := range theirs.devices {
		if name == "all" {
			continue
		}
		mine, ok := ours.devices[name]
		switch {
		case !ok:
			notes = append(notes, fmt.Sprintf("NVIDIA's device %q is not a name of the agent's", name))
		case !slices.Equal(mine, nodes):
			problems = append(problems, fmt.Sprintf("device %q: the agent's nodes %v, NVIDIA's %v", name, mine, nodes))
		}
	}
	diff := func(what string, a, b []string, into *[]string) {
		if d := minus(a, b); len(d) > 0 {
			*into = append(*into, fmt.Sprintf("%s only in the agent's spec: %s", what, clip(d)))
		}
		if d := minus(b, a); len(d) > 0 {
			*into = append(*into, fmt.Sprintf("%s only in NVIDIA's spec: %s", what, clip(d)))
		}
	}
	diff("device nodes", ours.nodes, theirs.nodes, &problems)
	diff("mounts", ours.mounts, theirs.mounts, &problems)
	diff("hooks", ours.hooks, theirs.hooks, &notes)
	diff("hook programs", ours.hookBin, theirs.hookBin, &notes)
	diff("variables", ours.env, theirs.env, &notes)
	return problems, notes
}

// clip keeps a long list readable in one report line.
func clip(l []string) string {
	if len(l) > 8 {
		return strings.Join(l[:8], ", ") + fmt.Sprintf(" and %d more", len(l)-8)
	}
	return strings.Join(l, ", ")
}

// missingOnHost lists the spec's device nodes and mount sources that do not
// exist on this machine (the agent's spec names host paths).
func missingOnHost(sum specSummary) []string {
	var out []string
	for _, n := range sum.nodes {
		if _, err := os.Stat(n); err != nil {
			out = append(out, n)
		}
	}
	for _, m := range sum.mounts {
		host, _, _ := strings.Cut(m, " -> ")
		if _, err := os.Stat(host); err != nil {
			out = append(out, host)
		}
	}
	return out
}

func readSpec(path string) (*cdispec.Spec, error) {
	s, err := cdi.ReadSpec(path, 0)
	if err != nil {
		return nil, err
	}
	return s.Spec, nil
}

func runCDI(args []string, stdout io.Writer) (verdict, error) {
	fs := flag.NewFlagSet("cdi", flag.ContinueOnError)
	fs.SetOutput(stdout)
	dir := fs.String("dir", "", "where the agent's spec is written (its --cdi-spec-dir)")
	compare := fs.String("compare", "", "NVIDIA's spec of the same node (nvidia-ctk cdi generate --output=F), if any")
	driverRoot := fs.String("driver-root", "/", "the driver's root (the agent's --driver-root; here also its container path)")
	devRoot := fs.String("dev-root", "/", "the root holding dev/nvidia* (--dev-root)")
	hook := fs.String("hook", cardspec.HookAuto, "nvidia-cdi-hook's path, auto, or empty for none (--cdi-hook-path)")
	if err := fs.Parse(args); err != nil {
		return verdict{}, err
	}
	if *dir == "" {
		return verdict{}, fmt.Errorf("%w: --dir is required", errUsage)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return verdict{}, err
	}
	// The agent's own spec writer (agent/cardspec), as the agent calls it at start.
	res, err := cardspec.Write(cardspec.Options{Kind: cardspec.DefaultKind, Dir: abs,
		DriverRoot: *driverRoot, DriverRootCtrPath: *driverRoot, DevRoot: *devRoot, DevRootCtrPath: *devRoot,
		HookPath: *hook, NVML: gonvml.New()})
	if err != nil {
		return fail("the agent's card spec: %v", err), nil
	}
	ours, err := readSpec(res.Path)
	if err != nil {
		return fail("the agent's card spec %s does not read back: %v", res.Path, err), nil
	}
	sum := summarize(ours)
	fmt.Fprintf(stdout, "agent spec %s: devices %v; %d device nodes, %d mounts, %d hooks\n", res.Path, res.Devices, len(sum.nodes), len(sum.mounts), len(sum.hooks))
	problems := []string{}
	if m := missingOnHost(sum); len(m) > 0 {
		problems = append(problems, "paths the spec names that this machine lacks: "+clip(m))
	}
	var notes []string
	if *compare == "" {
		notes = append(notes, "no NVIDIA spec to compare with")
	} else {
		theirs, err := readSpec(*compare)
		if err != nil {
			return verdict{}, fmt.Errorf("NVIDIA's spec: %w", err)
		}
		ts := summarize(theirs)
		fmt.Fprintf(stdout, "NVIDIA spec %s (kind %s): %d devices, %d device nodes, %d mounts, %d hooks\n", *compare, theirs.Kind, len(ts.devices), len(ts.nodes), len(ts.mounts), len(ts.hooks))
		p, n := compareSpecs(sum, ts)
		problems, notes = append(problems, p...), append(notes, n...)
	}
	for _, n := range notes {
		fmt.Fprintln(stdout, "note:", n)
	}
	if len(problems) > 0 {
		return fail("%s", strings.Join(problems, "; ")), nil
	}
	what := "every path it names exists"
	if *compare != "" {
		what += "; the same device nodes and mounts as NVIDIA's"
	}
	return pass("%d devices, %d mounts: %s", len(res.Devices), len(sum.mounts), what), nil
}
