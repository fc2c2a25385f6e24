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
// clientConnection.kubeconfig set to a file in dir and rewrites the arguments.
// An explicit clientConnection.kubeconfig in the profile wins.
func WithKubeconfig(args []string, dir string) ([]string, error) {
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
	f, err := os.CreateTemp(dir, "qgpu-scheduler-config-*.yaml")
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
