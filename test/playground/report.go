package main

import (
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// describeNodes is one line per node: "t4-0 (2xT4)", "v100-mixed-0 (2xV100, mixed)".
func describeNodes(nodes []harness.NodeSpec) string {
	var parts []string
	for _, n := range nodes {
		extra := ""
		if n.Mixed {
			extra = ", online/offline"
		}
		parts = append(parts, fmt.Sprintf("%s (%s%s)", n.Name, n.Cards, extra))
	}
	return strings.Join(parts, ", ")
}

// kubectlQGPU runs bin/kubectl-qgpu against the playground, echoing the
// command line as a user would type it.
func kubectlQGPU(w io.Writer, kubeconfig string, args ...string) error {
	bin, err := harness.BinaryPath("", "KUBECTL_QGPU_BIN", "kubectl-qgpu")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n$ bin/kubectl-qgpu %s\n", strings.Join(args, " "))
	cmd := exec.Command(bin, append(args, "--kubeconfig="+kubeconfig)...)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl-qgpu %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// printOutcome prints the rejected examples with their reasons and any
// example that did not land as expected; it returns how many did not.
func printOutcome(w io.Writer, exs []*example) int {
	var rejected, bad []*example
	for _, e := range exs {
		switch {
		case !e.landed():
			bad = append(bad, e)
		case e.WantRejected:
			rejected = append(rejected, e)
		}
	}
	if len(rejected) > 0 {
		fmt.Fprintf(w, "\nRefused at creation, as these examples should be (label %s=%s), with the admission policy's reason:\n", LabelExpect, ExpectRejected)
		for _, e := range rejected {
			fmt.Fprintf(w, "  %-26s %s\n", e.Name, e.Refused)
		}
	}
	if len(bad) > 0 {
		fmt.Fprintf(w, "\nNOT as expected:\n")
		for _, e := range bad {
			fmt.Fprintf(w, "  %-26s %s\n", e.Name, e.state())
		}
	}
	return len(bad)
}

// state says what became of an example that did not land as expected.
func (e *example) state() string {
	switch {
	case e.wrong():
		where := "unbound"
		if e.Node != "" {
			where = "bound to " + e.Node
		}
		return "should be refused at creation by the admission policies (manifests/admission), but was created: " + where
	case e.Node == "":
		reason := e.Reason
		if reason == "" {
			reason = "no FailedScheduling event"
		}
		return "not scheduled: " + reason
	case e.Phase != "Running":
		return fmt.Sprintf("bound to %s but %s (did the kubelet admit it? see the node's node.log)", e.Node, e.Phase)
	default:
		return fmt.Sprintf("running on %s without the agent's grant (see the node's agent.log)", e.Node)
	}
}
