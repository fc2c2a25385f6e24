package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	cgroupsystemd "github.com/opencontainers/cgroups/systemd"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// Drivers of the kubelet's cgroup manager.
const (
	DriverSystemd  = "systemd"
	DriverCgroupfs = "cgroupfs"
)

// Kubelet says where the kubelet puts pod cgroups: its cgroupRoot
// (--cgroup-root) and cgroupDriver (--cgroup-driver). The zero value is the
// kubelet's default root with either driver tried (systemd first).
type Kubelet struct {
	// CgroupRoot as the kubelet takes it: "" or "/" for the default, a
	// cgroupfs path ("/custom/pods") or a systemd slice ("/custom.slice",
	// "/a.slice/a-b.slice").
	CgroupRoot string
	Driver     string // DriverSystemd, DriverCgroupfs, or "" for both
}

// Validate checks the driver and the root.
func (k Kubelet) Validate() error {
	switch k.Driver {
	case "", DriverSystemd, DriverCgroupfs:
	default:
		return fmt.Errorf("kubelet cgroup driver %q: must be %q or %q", k.Driver, DriverSystemd, DriverCgroupfs)
	}
	if k.CgroupRoot != "" && !strings.HasPrefix(k.CgroupRoot, "/") {
		return fmt.Errorf("kubelet cgroup root %q: must be absolute", k.CgroupRoot)
	}
	if strings.Contains(k.CgroupRoot, "..") {
		return fmt.Errorf("kubelet cgroup root %q: must not contain \"..\"", k.CgroupRoot)
	}
	if k.Driver == DriverSystemd {
		if _, err := k.podPath("", "uid", true); err != nil {
			return err
		}
	}
	return nil
}

// ReadKubeletConfig reads cgroupRoot and cgroupDriver from a kubelet
// configuration file (KubeletConfiguration, /var/lib/kubelet/config.yaml).
// Fields it lacks keep the kubelet's defaults (root "/", driver cgroupfs).
func ReadKubeletConfig(path string) (Kubelet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Kubelet{}, fmt.Errorf("reading the kubelet configuration: %w", err)
	}
	// The kubelet's own type: its other fields are read and left alone.
	var cfg kubeletconfig.KubeletConfiguration
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return Kubelet{}, fmt.Errorf("kubelet configuration %s: %w", path, err)
	}
	if gvk := cfg.GroupVersionKind(); gvk != kubeletconfig.SchemeGroupVersion.WithKind("KubeletConfiguration") {
		return Kubelet{}, fmt.Errorf("kubelet configuration %s: apiVersion %q kind %q, want %s KubeletConfiguration",
			path, cfg.APIVersion, cfg.Kind, kubeletconfig.SchemeGroupVersion)
	}
	k := Kubelet{CgroupRoot: cfg.CgroupRoot, Driver: cfg.CgroupDriver}
	if k.Driver == "" {
		k.Driver = DriverCgroupfs // the kubelet's default
	}
	if err := k.Validate(); err != nil {
		return Kubelet{}, fmt.Errorf("kubelet configuration %s: %w", path, err)
	}
	return k, nil
}

// rootNames turns the cgroup root into the kubelet's cgroup name
// components: "/a/b" and "/a.slice/a-b.slice" are both [a b].
func (k Kubelet) rootNames() []string {
	root := strings.Trim(k.CgroupRoot, "/")
	if root == "" {
		return nil
	}
	parts := strings.Split(root, "/")
	if last := parts[len(parts)-1]; strings.HasSuffix(last, ".slice") {
		return strings.Split(strings.TrimSuffix(last, ".slice"), "-")
	}
	return parts
}

func (k Kubelet) drivers() []bool { // systemd?
	switch k.Driver {
	case DriverSystemd:
		return []bool{true}
	case DriverCgroupfs:
		return []bool{false}
	}
	return []bool{true, false}
}

// podPath is the pod's cgroup path relative to the hierarchy, as the
// kubelet names it: cgroupfs joins the names ("kubepods/burstable/pod<uid>"),
// systemd nests slices whose names repeat their parents'
// ("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice").
// The systemd form is the kubelet's CgroupName.ToSystemd
// (k8s.io/kubernetes pkg/kubelet/cm/cgroup_manager_linux.go): every name
// escaped ("-" to "_"), joined with "-", expanded by the ExpandSlice of
// github.com/opencontainers/cgroups/systemd, which also refuses names
// systemd would (an empty component: a root of "/a//b").
func (k Kubelet) podPath(qos, uid string, systemd bool) (string, error) {
	names := append(k.rootNames(), "kubepods")
	if qos != "" {
		names = append(names, qos)
	}
	names = append(names, "pod"+uid)
	if !systemd {
		return filepath.Join(names...), nil
	}
	for i, n := range names {
		names[i] = strings.ReplaceAll(n, "-", "_")
	}
	p, err := cgroupsystemd.ExpandSlice(strings.Join(names, "-") + ".slice")
	if err != nil {
		return "", fmt.Errorf("kubelet cgroup root %q with the systemd driver: %w", k.CgroupRoot, err)
	}
	return strings.TrimPrefix(p, "/"), nil
}

// PodDirCandidates lists, relative to the hierarchy, where this kubelet
// may have put the pod's cgroup, for each QoS class.
func (k Kubelet) PodDirCandidates(uid string) []string {
	var out []string
	for _, systemd := range k.drivers() {
		for _, qos := range qosClasses {
			// A root systemd cannot name has no systemd candidates;
			// Validate says why.
			if p, err := k.podPath(qos, uid, systemd); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}
