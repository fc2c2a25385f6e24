// Command qgpu-agent-sim is qgpu-agent with the simulated GPU activity of
// test/fakeactivity: with --fake-cards and --fake-activity-file it gives
// every granted pod a fake process and cgroup, busy or idle as the file
// says, so that the priority controller runs on a node without GPUs. The
// test harness, the playground and make chaos run it on mixed nodes; the
// shipped image holds qgpu-agent, which cannot simulate anything.
package main

import "github.com/qgpu-scheduler/qgpu/cmd/qgpu-agent/app"

func main() {
	var a activity
	app.Main(app.WithFlags("simulated activity (test build)", a.addFlags), app.WithSidecar(a.sidecar))
}
