package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// sliceOptions is one container's slice and what surrounds it: the
// hami-core backend's host paths, the delivery, and what the pod itself
// sets.
type sliceOptions struct {
	uuid      string
	index     int
	memoryGiB int64
	cores     int64
	class     string
	policy    string
	root      string // <root>/regions (--hami-region-root), <root>/cdi/...
	libDir    string
	lockDir   string
	podUID    string
	container string
	delivery  string
	podEnv    []string // NAME=value, in the pod's spec
	drop      []string // globs of agent variables left out (an older agent's answer)
}

// containerView is what the container's first process gets: its
// environment (the last value of each name, as runc sets the list) and the
// bind mounts of the slice.
type containerView struct {
	env    map[string]string
	mounts []viewMount
}

type viewMount struct {
	dest, src string
	readOnly  bool
}

// allocateSlice asks the agent's hami-core backend for the slice's memory
// and core answers, delivered as the agent delivers them, and returns the
// container's view: under cdi-cri (the agent's default) the answers' CDI
// devices injected into an OCI spec that already holds the pod's
// environment, with the CDI library as the runtime does; under envvar the
// answers' variables with the pod's own after them (the kubelet's order).
func allocateSlice(o sliceOptions) (containerView, error) {
	hami := enforce.HAMiOptions{LibDir: o.libDir, RegionRoot: filepath.Join(o.root, "regions"), LockDir: o.lockDir}
	class, policy := protocol.Class(o.class), protocol.Policy(o.policy)
	core, ok := enforce.CoreResource(class)
	if !ok {
		return containerView{}, fmt.Errorf("%w: --class %q: general or offline (online slices hold no cores)", errUsage, o.class)
	}
	req := enforce.Request{Class: class, Policy: policy, PodUID: o.podUID, Namespace: "gpu-check", Pod: "gpu-check",
		Container: o.container, Slices: []protocol.Slice{{Index: o.index, UUID: o.uuid, MemoryGiB: o.memoryGiB, Cores: o.cores}}}
	if len(o.drop) > 0 {
		req.Edit = func(envs map[string]string) {
			for k := range envs {
				for _, g := range o.drop {
					if ok, _ := path.Match(g, k); ok {
						delete(envs, k)
					}
				}
			}
		}
	}
	switch enforce.Strategy(o.delivery) {
	case enforce.StrategyCDICRI:
		return overCDI(o, hami, req, core)
	case enforce.StrategyEnvvar:
		b, err := enforce.New(enforce.NameHAMiCore, enforce.Options{HAMi: hami})
		if err != nil {
			return containerView{}, err
		}
		view := containerView{env: map[string]string{}}
		for _, res := range []string{protocol.ResourceMemory, core} {
			req.Resource = res
			resp, err := b.Allocate(req)
			if err != nil {
				return containerView{}, err
			}
			for k, v := range resp.Envs {
				view.env[k] = v
			}
			for _, m := range resp.Mounts {
				view.mounts = append(view.mounts, viewMount{dest: m.ContainerPath, src: m.HostPath, readOnly: m.ReadOnly})
			}
		}
		applyEnv(view.env, o.podEnv)
		return view, nil
	}
	return containerView{}, fmt.Errorf("%w: --delivery %q: cdi-cri or envvar", errUsage, o.delivery)
}

func overCDI(o sliceOptions, hami enforce.HAMiOptions, req enforce.Request, core string) (containerView, error) {
	nodeDir, ownDir := filepath.Join(o.root, "cdi", "node"), filepath.Join(o.root, "cdi", "own")
	if err := writeNodeSpec(nodeDir, o.uuid, o.index); err != nil {
		return containerView{}, err
	}
	specs, err := enforce.NewCDISpecs(ownDir, []string{nodeDir, ownDir})
	if err != nil {
		return containerView{}, err
	}
	d, err := enforce.NewDelivery(enforce.StrategyCDICRI, specs)
	if err != nil {
		return containerView{}, err
	}
	b, err := enforce.New(enforce.NameHAMiCore, enforce.Options{HAMi: hami, Delivery: d})
	if err != nil {
		return containerView{}, err
	}
	var names []string
	for _, res := range []string{protocol.ResourceMemory, core} {
		req.Resource = res
		resp, err := b.Allocate(req)
		if err != nil {
			return containerView{}, err
		}
		for _, dev := range resp.CdiDevices {
			names = append(names, dev.Name)
		}
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(nodeDir, ownDir), cdi.WithAutoRefresh(false))
	if err != nil {
		return containerView{}, err
	}
	spec := &oci.Spec{Process: &oci.Process{Env: append([]string(nil), o.podEnv...)}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(spec, names...); err != nil {
		return containerView{}, fmt.Errorf("injecting %v: %w (unresolved %v)", names, err, unresolved)
	}
	view := containerView{env: map[string]string{}}
	applyEnv(view.env, spec.Process.Env)
	for _, m := range spec.Mounts {
		ro := false
		for _, opt := range m.Options {
			ro = ro || opt == "ro"
		}
		view.mounts = append(view.mounts, viewMount{dest: m.Destination, src: m.Source, readOnly: ro})
	}
	return view, nil
}

// writeNodeSpec stands in for the node's NVIDIA spec: the card's device by
// UUID and by index, which the memory answer names. It carries one
// variable instead of the card's device node: the check runs on the card
// itself, outside a container, and the CDI library would stat the node
// (absent where make gpu-check DRY=1 runs).
func writeNodeSpec(dir, uuid string, index int) error {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return err
	}
	edits := cdispec.ContainerEdits{Env: []string{"QGPU_GPUCHECK_NODE_SPEC=stand-in"}}
	spec := &cdispec.Spec{Version: "0.5.0", Kind: enforce.CDICardKind, Devices: []cdispec.Device{
		{Name: uuid, ContainerEdits: edits}, {Name: strconv.Itoa(index), ContainerEdits: edits}}}
	if err := cache.WriteSpec(spec, "nvidia.yaml"); err != nil {
		return fmt.Errorf("writing the stand-in node spec: %w", err)
	}
	return nil
}

// applyEnv sets NAME=value entries in order: a later one wins.
func applyEnv(env map[string]string, list []string) {
	for _, kv := range list {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
}

// writeView prints the view for run.sh: `env NAME=value` lines (sorted),
// then `mount <container path> <host path> ro|rw` lines. Under preload no
// mount is made: the library comes from LD_PRELOAD and every variable that
// names a path inside a mount names the host's path instead.
func writeView(w io.Writer, v containerView, preload bool) error {
	env := v.env
	if preload {
		env = map[string]string{}
		for k, val := range v.env {
			env[k] = hostPath(v.mounts, val)
		}
		lib := hostPath(v.mounts, enforce.HAMiContainerLib)
		if lib == enforce.HAMiContainerLib {
			return errors.New("no mount holds the library: nothing to preload")
		}
		env["LD_PRELOAD"] = lib
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.ContainsAny(k+env[k], " \t\n") {
			return fmt.Errorf("variable %s=%q holds white space: run.sh reads words", k, env[k])
		}
		fmt.Fprintf(w, "env %s=%s\n", k, env[k])
	}
	if preload {
		return nil
	}
	for _, m := range v.mounts {
		if strings.ContainsAny(m.dest+m.src, " \t\n") {
			return fmt.Errorf("mount %s from %s holds white space: run.sh reads words", m.dest, m.src)
		}
		mode := "rw"
		if m.readOnly {
			mode = "ro"
		}
		fmt.Fprintf(w, "mount %s %s %s\n", m.dest, m.src, mode)
	}
	return nil
}

// hostPath maps a path inside the container to the host's through the
// mounts (the longest mount that holds it); anything else is returned as is.
func hostPath(mounts []viewMount, p string) string {
	best := -1
	for i, m := range mounts {
		if (p == m.dest || strings.HasPrefix(p, m.dest+"/")) && (best < 0 || len(m.dest) > len(mounts[best].dest)) {
			best = i
		}
	}
	if best < 0 {
		return p
	}
	return mounts[best].src + strings.TrimPrefix(p, mounts[best].dest)
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func runHAMiSlice(args []string, stdout io.Writer) (verdict, error) {
	var o sliceOptions
	var podEnv, drop listFlag
	fs := flag.NewFlagSet("hami-slice", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.StringVar(&o.uuid, "uuid", "", "the card's UUID")
	fs.IntVar(&o.index, "index", 0, "the card's NVML index")
	fs.Int64Var(&o.memoryGiB, "memory-gib", 4, "the slice's memory")
	fs.Int64Var(&o.cores, "cores", 30, "the slice's cores (qgpu-core, or qgpu-core-greedy for offline)")
	fs.StringVar(&o.class, "class", string(protocol.ClassGeneral), "general or offline")
	fs.StringVar(&o.policy, "policy", string(protocol.PolicyFixedShare), "the node's policy: fixed-share, burst-share or best-effort")
	fs.StringVar(&o.root, "root", "", "work directory: the region root is <root>/regions, the CDI specs under <root>/cdi")
	fs.StringVar(&o.libDir, "lib-dir", "", "the host directory holding libvgpu.so (--hami-lib-dir)")
	fs.StringVar(&o.lockDir, "lock-dir", "/tmp/vgpulock", "the node's lock root (--hami-lock-dir; the agent mounts its card's directory under it); HAMi-core opens /tmp/vgpulock/lock itself")
	fs.StringVar(&o.podUID, "pod-uid", "", "the pod's UID (a new one gives the container a new region)")
	fs.StringVar(&o.container, "container", "main", "the container's name")
	fs.StringVar(&o.delivery, "delivery", string(enforce.StrategyCDICRI), "cdi-cri (the agent's default) or envvar")
	fs.Var(&podEnv, "pod-env", "NAME=value the pod's spec sets itself (repeat)")
	fs.Var(&drop, "drop-agent-var", "a glob of variables left out of the agent's answer, to stand for an older agent (repeat)")
	format := fs.String("format", "mounts", "mounts (env and mount lines) or preload (LD_PRELOAD and host paths, no mounts)")
	if err := fs.Parse(args); err != nil {
		return verdict{}, err
	}
	o.podEnv, o.drop = podEnv, drop
	for _, f := range []struct{ name, v string }{{"--uuid", o.uuid}, {"--root", o.root}, {"--lib-dir", o.libDir}, {"--pod-uid", o.podUID}} {
		if f.v == "" {
			return verdict{}, fmt.Errorf("%w: %s is required", errUsage, f.name)
		}
	}
	for _, kv := range o.podEnv {
		if !strings.Contains(kv, "=") {
			return verdict{}, fmt.Errorf("%w: --pod-env %q: want NAME=value", errUsage, kv)
		}
	}
	if *format != "mounts" && *format != "preload" {
		return verdict{}, fmt.Errorf("%w: --format %q: mounts or preload", errUsage, *format)
	}
	for _, p := range []*string{&o.root, &o.libDir, &o.lockDir} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return verdict{}, err
		}
		*p = abs
	}
	view, err := allocateSlice(o)
	if err != nil {
		return verdict{}, err
	}
	return verdict{}, writeView(stdout, view, *format == "preload")
}
