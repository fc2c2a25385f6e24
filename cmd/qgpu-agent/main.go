// Command qgpu-agent is the qGPU node agent: card discovery, inventory, the
// kubelet device plugins for the qGPU resources, and enforcement.
package main

import "github.com/qgpu-scheduler/qgpu/cmd/qgpu-agent/app"

func main() {
	app.Main()
}
