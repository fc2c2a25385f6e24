package main

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// The DRA leg (docs/real-node.md#the-dra-leg): a third node, e2e-node-dra,
// whose agent runs in DRA mode (manifests/overlays/dra) while the other two
// keep the device plugins; the cluster side is manifests/dra and
// kube-apiserver's DRAConsumableCapacity gate (run.go). Its claims are
// checked while the device-plugin nodes run their own checks, and its
// verdict is its own line:
//
//	e2e-node dra: N claims checked, M rejections as expected, F failures

const (
	// draNodeName is the DRA leg's node.
	draNodeName = "e2e-node-dra"
	// draFakeCards are its cards: a T4 holds 14 whole GiB.
	draFakeCards = "2xT4"
	// draNodeLabel selects the node for the DRA agent (qgpu-agent-dra) and
	// keeps qgpu-agent-colocation off it.
	draNodeLabel = "e2e.qgpu.io/dra"
	// draAgentApp is the app label of the DRA agent's DaemonSet and pods.
	draAgentApp = "qgpu-agent-dra"
)

// draNode is the DRA leg's node: mixed (online and offline claims go only to
// mixed nodes), runc as the default runtime as on e2e-node-1, the agent's
// own card spec (qgpu.io/gpu), the env backend throughout.
func draNode() *node {
	return &node{name: draNodeName, prefix: "169.254.13", dra: true, mode: runtimeMode{acceptEnvvar: true},
		labels: []string{"qgpu-device-enable=enable", "mixed-qgpu-enable=enable", draNodeLabel + "=enable"}}
}

// splitDRANode returns the device-plugin nodes and the DRA node (nil when
// there is none).
func splitDRANode(nodes []*node) ([]*node, *node) {
	var plain []*node
	var dra *node
	for _, n := range nodes {
		if n.dra {
			dra = n
		} else {
			plain = append(plain, n)
		}
	}
	return plain, dra
}

// draAgentOverrides turn manifests/overlays/colocation/agent, with the
// manifests/overlays/dra component, into qgpu-agent-dra: the colocation
// agent (hostPID and the cgroup tree, for the online/offline controller)
// in DRA mode, on the nodes labelled draNodeLabel only, with the DRA node's
// fake cards.
func draAgentOverrides(o options) string {
	return imageOverrides(o) + fmt.Sprintf(`patches:
%[1]s- target: {kind: DaemonSet, name: qgpu-agent-colocation}
  patch: |-
    - {op: replace, path: /metadata/name, value: %[2]s}
    - {op: replace, path: /metadata/labels/app, value: %[2]s}
    - {op: replace, path: /spec/selector/matchLabels/app, value: %[2]s}
    - {op: replace, path: /spec/template/metadata/labels/app, value: %[2]s}
    - {op: add, path: /spec/template/spec/nodeSelector/%[3]s, value: enable}
`, agentPatch(o, draFakeCards), draAgentApp, jsonPointerEscape(draNodeLabel))
}

// jsonPointerEscape escapes a map key for a JSON patch path (RFC 6901).
func jsonPointerEscape(key string) string {
	var b bytes.Buffer
	for _, r := range key {
		switch r {
		case '~':
			b.WriteString("~0")
		case '/':
			b.WriteString("~1")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// applyDRA applies manifests/dra (the DeviceClasses and the allocation
// policy) and the DRA agent.
func applyDRA(ctx context.Context, o options, root string, cp *harness.ControlPlane) error {
	cluster, err := writeKustomization(o, root, "dra", "manifests/dra", "")
	if err != nil {
		return err
	}
	agent, err := writeKustomization(o, root, "dra-agent", "manifests/overlays/colocation/agent", draAgentOverrides(o),
		"manifests/overlays/nvidia-runtime-class", "manifests/overlays/dra")
	if err != nil {
		return err
	}
	for _, dir := range []string{cluster, agent} {
		if _, err := apply(ctx, cp, dir, nil); err != nil {
			return err
		}
	}
	return nil
}

// The fewest claims and rejections a DRA leg that ran whole counts: six
// claims under the default env backend, three per backend phase, the
// shared claim's two consumers (17), and five rejections (too big, a
// general claim kept off the online/offline card, the default scheduler,
// and the two of the test driver's claims). Fewer is a failure, so that a
// check skipped without a failure of its own does not pass.
const (
	draMinClaims     = 17
	draMinRejections = 5
)

// draResult counts what the DRA leg checked.
type draResult struct {
	claims, rejections, failures int
}

// draLeg is the DRA leg running beside the other checks: its output is
// kept and printed when it is waited for, so that it does not interleave.
type draLeg struct {
	done chan draResult
	out  *bytes.Buffer
}

// startDRALeg runs the leg's checks on n in a goroutine.
func startDRALeg(ctx context.Context, start time.Time, o options, cp *harness.ControlPlane, n *node) *draLeg {
	leg := &draLeg{done: make(chan draResult, 1), out: &bytes.Buffer{}}
	go func() {
		c := &draChecker{ctx: ctx, start: start, o: o, cp: cp, n: n, out: leg.out}
		c.run()
		leg.done <- c.res
	}()
	return leg
}

// wait waits for the leg and prints its output.
func (l *draLeg) wait() draResult {
	res := <-l.done
	fmt.Print(l.out.String())
	return res
}
