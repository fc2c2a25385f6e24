package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// examplesOnOperatorSpecs runs the examples again with no card spec of the
// agent's on any node: e2e-node-1's agent gets --cdi-card-kind="" (its
// DaemonSet patched, its pod replaced), its qgpu.io/gpu spec is removed and
// the spec NVIDIA's device plugin writes takes its place, as on e2e-node-2
// from the start. Every example must then be served from the specs GPU
// Operator's components wrote.
func examplesOnOperatorSpecs(ctx context.Context, start time.Time, o options, cp *harness.ControlPlane, examples string, nodes []*node) (result, error) {
	var res result
	n := nodes[0]
	if err := deleteAndWait(ctx, cp, "app.kubernetes.io/part-of=qgpu-examples"); err != nil {
		return res, err
	}
	// The backends' phase left the nodes on mps.
	for _, other := range nodes {
		if err := labelNode(ctx, cp, other.name, map[string]string{protocol.LabelEnforcement: "env"}); err != nil {
			return res, err
		}
	}
	onNode := metav1.ListOptions{LabelSelector: "app=qgpu-agent", FieldSelector: "spec.nodeName=" + n.name}
	before, err := cp.Client.CoreV1().Pods(systemNamespace).List(ctx, onNode)
	if err != nil || len(before.Items) != 1 {
		return res, fmt.Errorf("the agent's pod on %s: %v (%d pods)", n.name, err, len(before.Items))
	}
	dss := cp.Client.AppsV1().DaemonSets(systemNamespace)
	ds, err := dss.Get(ctx, "qgpu-agent", metav1.GetOptions{})
	if err != nil {
		return res, err
	}
	c := &ds.Spec.Template.Spec.Containers[0]
	c.Args = append(slices.Clone(c.Args), "--cdi-card-kind=")
	if _, err := dss.Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		return res, fmt.Errorf("giving qgpu-agent --cdi-card-kind=\"\": %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Client.CoreV1().Pods(systemNamespace).List(ctx, onNode)
		if err != nil || len(list.Items) != 1 {
			return false, nil
		}
		p := &list.Items[0]
		return p.UID != before.Items[0].UID && podReady(p), nil
	})
	if err != nil {
		return res, fmt.Errorf("the agent on %s with --cdi-card-kind=\"\" not Ready: %w", n.name, err)
	}
	dir := filepath.Join(n.dir, "cdi-dynamic")
	if err := os.Remove(filepath.Join(dir, "qgpu.io-gpu.yaml")); err != nil && !os.IsNotExist(err) {
		return res, fmt.Errorf("removing the agent's card spec: %w", err)
	}
	if err := writeDevicePluginSpec(dir, n.name, cardCount(o.fakeCards)); err != nil {
		return res, err
	}
	n.devicePluginSpec = true
	stepLog(start, "%s: the agent writes no card spec; NVIDIA's device plugin spec in its place", n.name)
	ex, err := checkExamples(ctx, start, cp, examples, nodes)
	res.add(ex)
	if err == nil {
		if _, statErr := os.Stat(filepath.Join(dir, "qgpu.io-gpu.yaml")); statErr == nil {
			res.failures++
			fmt.Printf("FAIL %s: the agent wrote its card spec with --cdi-card-kind=\"\"\n", n.name)
		}
		stepLog(start, "every example served from GPU Operator's specs alone")
	}
	return res, err
}
