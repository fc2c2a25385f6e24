package main

import (
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

func writePlot(path string, policies []placement.Policy, results map[placement.Policy][]sim.Result) error {
	return nil
}
