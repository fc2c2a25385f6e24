// kubectl-qgpu is a kubectl plugin that shows qGPU cards and who holds them
// (docs/kubectl-qgpu.md):
//
//	kubectl qgpu nodes     cards per node: model, memory and cores used/free, pods
//	kubectl qgpu pods      qGPU pods: class, node, cards, slices, agent grant, suspended
//	kubectl qgpu check     every violated invariant; exits 1 if there is any, 2 if it could not check
//	kubectl qgpu quota     per-namespace quota by GPU model: use against limits
//	kubectl qgpu version   the stamped version (also --version)
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/component-base/logs"

	"github.com/qgpu-scheduler/qgpu/cmd/kubectl-qgpu/app"
)

func main() {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	err := app.NewCommand(streams).Execute()
	logs.FlushLogs()
	os.Exit(app.ExitCode(err))
}
