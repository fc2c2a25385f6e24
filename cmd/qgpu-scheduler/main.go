// qgpu-scheduler is kube-scheduler with the qgpu plugin (and scheduler-plugins'
// Coscheduling and CapacityScheduling) compiled in.
package main

import (
	"fmt"
	"io"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"

	"github.com/qgpu-scheduler/qgpu/cmd/qgpu-scheduler/command"
	"github.com/qgpu-scheduler/qgpu/internal/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run writes nothing to disk unless --config and a kubeconfig are both given
// (command.WithKubeconfig): the shipped Deployment runs it with a read-only
// root file system and no writable /tmp.
func run(args []string, stdout, stderr io.Writer) int {
	if wantsVersion(args) {
		fmt.Fprintln(stdout, version.String("qgpu-scheduler"))
		return 0
	}
	dir := &command.LazyDir{Pattern: "qgpu-scheduler-"}
	defer dir.Remove()
	args, err := command.WithKubeconfig(args, dir.Path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	cmd := command.New()
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	return cli.Run(cmd)
}

// wantsVersion answers --version ourselves: kube-scheduler's flag
// (component-base's verflag) prints "Kubernetes <component-base version>"
// (programName is the constant "Kubernetes", verflag.go:102 and :124 of
// v0.34.10), which names the Kubernetes release the binary is built from
// (also stamped, see the Makefile), not this project's.
func wantsVersion(args []string) bool {
	for _, a := range args {
		switch a {
		case "--version", "-version", "--version=true":
			return true
		case "--":
			return false
		}
	}
	return false
}
