package command

import (
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// WithKubeconfig makes --kubeconfig (or $KUBECONFIG) count when --config is
// given: stock kube-scheduler silently ignores it then and falls back to the
// in-cluster config, which surprises everyone running a profile against a
// test or playground cluster. It writes the profile with
// clientConnection.kubeconfig set to a file in the directory dir returns, and
// rewrites the arguments. An explicit clientConnection.kubeconfig in the
// profile wins. dir is called only when a file must be written, so that a
// start without a kubeconfig (in a cluster, on a read-only root) writes nothing.
func WithKubeconfig(args []string, dir func() (string, error)) ([]string, error) {
	cfgIdx, cfgPath := flagValue(args, "config")
	_, kubeconfig := flagValue(args, "kubeconfig")
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}
	if cfgPath == "" || kubeconfig == "" {
		return args, nil
	}
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("reading --config: %w", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("parsing --config %s: %w", cfgPath, err)
	}
	cc, _ := cfg["clientConnection"].(map[string]any)
	if cc == nil {
		cc = map[string]any{}
	}
	if set, _ := cc["kubeconfig"].(string); set != "" {
		return args, nil
	}
	cc["kubeconfig"] = kubeconfig
	cfg["clientConnection"] = cc
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	d, err := dir()
	if err != nil {
		return nil, fmt.Errorf("writing effective config: %w", err)
	}
	f, err := os.CreateTemp(d, "qgpu-scheduler-config-*.yaml")
	if err != nil {
		return nil, fmt.Errorf("writing effective config: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(out); err != nil {
		return nil, fmt.Errorf("writing effective config: %w", err)
	}
	rewritten := append([]string(nil), args...)
	rewritten[cfgIdx] = "--config=" + f.Name()
	if strings.TrimPrefix(args[cfgIdx], "-") == "config" || args[cfgIdx] == "--config" {
		rewritten = append(rewritten[:cfgIdx+1], rewritten[cfgIdx+2:]...)
	}
	return rewritten, nil
}

// flagValue finds --name=value or --name value; it returns the index of the flag.
func flagValue(args []string, name string) (int, string) {
	for i, a := range args {
		switch {
		case a == "--"+name || a == "-"+name:
			if i+1 < len(args) {
				return i, args[i+1]
			}
		case strings.HasPrefix(a, "--"+name+"="):
			return i, strings.TrimPrefix(a, "--"+name+"=")
		case strings.HasPrefix(a, "-"+name+"="):
			return i, strings.TrimPrefix(a, "-"+name+"=")
		}
	}
	return -1, ""
}

// LazyDir is a temporary directory created on the first call to Path.
type LazyDir struct {
	Pattern string // as os.MkdirTemp's
	path    string
}

// Path creates the directory (once) and returns it.
func (d *LazyDir) Path() (string, error) {
	if d.path != "" {
		return d.path, nil
	}
	p, err := os.MkdirTemp("", d.Pattern)
	if err != nil {
		return "", err
	}
	d.path = p
	return p, nil
}

// Remove removes the directory if Path created it.
func (d *LazyDir) Remove() {
	if d.path != "" {
		_ = os.RemoveAll(d.path)
		d.path = ""
	}
}
