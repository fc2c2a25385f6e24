// qgpu-scheduler is kube-scheduler with the qgpu plugin (and scheduler-plugins'
// Coscheduling and CapacityScheduling) compiled in.
package main

import (
	"fmt"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"

	"github.com/qgpu-scheduler/qgpu/cmd/qgpu-scheduler/command"
)

func main() {
	dir, err := os.MkdirTemp("", "qgpu-scheduler-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	args, err := command.WithKubeconfig(os.Args[1:], dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cmd := command.New()
	cmd.SetArgs(args)
	code := cli.Run(cmd)
	os.RemoveAll(dir)
	os.Exit(code)
}
