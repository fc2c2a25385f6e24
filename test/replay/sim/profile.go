package sim

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	argsv1 "github.com/qgpu-scheduler/qgpu/config/args/v1"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

// DefaultProfile is the shipped default profile, relative to the repository
// root: the replay's --policy default and the integration test that compares
// the scheduler with the replay place by whatever general-pod policy it
// configures, so the replay and what users run cannot drift apart.
const DefaultProfile = "config/qgpu-scheduler.yaml"

// ProfilePolicy reads the QGPU plugin's policy from a scheduler profile
// file. The replay uses one policy for cards and nodes, so a profile whose
// cardPolicy and nodePolicy differ, or with no QGPU args, or with QGPU args
// that disagree between profiles, is refused; an unset policy is the
// plugin's default (config/args/v1's SetDefaults_QGPUArgs).
func ProfilePolicy(path string) (placement.Policy, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("profile: %w", err)
	}
	var cfg struct {
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
			PluginConfig  []struct {
				Name string `json:"name"`
				Args struct {
					NodePolicy string `json:"nodePolicy"`
					CardPolicy string `json:"cardPolicy"`
				} `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return "", fmt.Errorf("profile %s: %w", path, err)
	}
	var found placement.Policy
	for _, p := range cfg.Profiles {
		for _, pc := range p.PluginConfig {
			if pc.Name != "QGPU" {
				continue
			}
			node, card := orDefault(pc.Args.NodePolicy), orDefault(pc.Args.CardPolicy)
			switch {
			case node != card:
				return "", fmt.Errorf("profile %s: profile %q has nodePolicy %q and cardPolicy %q; the replay replays one policy for both", path, p.SchedulerName, node, card)
			case !node.Valid():
				return "", fmt.Errorf("profile %s: profile %q: nodePolicy %q is not one of %v", path, p.SchedulerName, node, placement.Policies)
			case found != "" && found != node:
				return "", fmt.Errorf("profile %s: profiles configure %q and %q; name one with --policy", path, found, node)
			}
			found = node
		}
	}
	if found == "" {
		return "", fmt.Errorf("profile %s: no QGPU pluginConfig", path)
	}
	return found, nil
}

// orDefault is the policy s names, or the args' default when s is unset.
func orDefault(s string) placement.Policy {
	if s == "" {
		var a argsv1.QGPUArgs
		argsv1.SetDefaults_QGPUArgs(&a)
		return placement.Policy(*a.NodePolicy)
	}
	return placement.Policy(s)
}
