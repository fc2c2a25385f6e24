package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

// defaultProfile is the shipped default profile: --policy default replays
// whatever general-pod policy it configures, so the replay and what users run
// cannot drift apart.
const defaultProfile = "config/qgpu-scheduler.yaml"

// profilePolicy reads the QGPU plugin's policy from a scheduler profile
// file. The replay uses one policy for cards and nodes, so a profile whose
// cardPolicy and nodePolicy differ, or with no QGPU args, or with QGPU args
// that disagree between profiles, is refused; an unset policy is the
// plugin's default, fragfit (config/args/v1).
func profilePolicy(path string) (placement.Policy, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--profile: %w", err)
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
		return "", fmt.Errorf("--profile %s: %w", path, err)
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
				return "", fmt.Errorf("--profile %s: profile %q has nodePolicy %q and cardPolicy %q; the replay replays one policy for both", path, p.SchedulerName, node, card)
			case !node.Valid():
				return "", fmt.Errorf("--profile %s: profile %q: nodePolicy %q is not one of %v", path, p.SchedulerName, node, placement.Policies)
			case found != "" && found != node:
				return "", fmt.Errorf("--profile %s: profiles configure %q and %q; name one with --policy", path, found, node)
			}
			found = node
		}
	}
	if found == "" {
		return "", fmt.Errorf("--profile %s: no QGPU pluginConfig", path)
	}
	return found, nil
}

func orDefault(s string) placement.Policy {
	if s == "" {
		return placement.FragFit
	}
	return placement.Policy(s)
}
