package main

import (
	"fmt"
	"strings"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// labelVocabularies enables the comma-separated vocabularies on every node
// by label, as an operator would; the agents read the labels when they start.
func labelVocabularies(nodes []harness.NodeSpec, list string) error {
	if list == "" {
		return nil
	}
	for _, name := range strings.Split(list, ",") {
		v, err := vocab.Parse(name)
		if err != nil {
			return fmt.Errorf("--vocabularies: %w", err)
		}
		for i := range nodes {
			if nodes[i].Labels == nil {
				nodes[i].Labels = map[string]string{}
			}
			nodes[i].Labels[vocab.Label(v)] = protocol.LabelValueEnable
		}
	}
	return nil
}
