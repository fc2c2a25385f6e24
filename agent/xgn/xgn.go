// Package xgn keeps T9k's xgn taint on the agent's own node: a node
// labelled sched.tensorstack.dev/node-alloc-mode=xgn carries
// sched.tensorstack.dev/xgn-mode=true:NoSchedule, so that pods without GPU
// stay off it, and a node labelled otherwise carries no such taint
// (docs/node-exclusive.md). The agent already may patch its own Node and no
// other (manifests/agent/own-node-policy.yaml), so keeping the taint here
// needs no new permission.
package xgn

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// T9k's node label and taint.
const (
	LabelAllocMode = "sched.tensorstack.dev/node-alloc-mode"
	ModeXGN        = "xgn"
	TaintKey       = "sched.tensorstack.dev/xgn-mode"
)

// Taint is the taint of an xgn node.
var Taint = v1.Taint{Key: TaintKey, Value: "true", Effect: v1.TaintEffectNoSchedule}

// Want returns the node's taints as they should be, and whether they differ
// from the node's: on an xgn node exactly one taint with TaintKey, Taint;
// elsewhere none. Taints with other keys are kept in their order.
func Want(node *v1.Node) ([]v1.Taint, bool) {
	xgn := node.Labels[LabelAllocMode] == ModeXGN
	out := make([]v1.Taint, 0, len(node.Spec.Taints)+1)
	ours := 0
	exact := false
	for _, t := range node.Spec.Taints {
		if t.Key != TaintKey {
			out = append(out, t)
			continue
		}
		ours++
		exact = exact || (t.Value == Taint.Value && t.Effect == Taint.Effect)
	}
	if xgn {
		out = append(out, Taint)
		return out, ours != 1 || !exact
	}
	return out, ours > 0
}

// Patch is the merge patch that sets the taints, guarded by the node's
// resourceVersion: a node changed since it was read is refused (Conflict),
// and the informer's next event brings the newer node.
func Patch(node *v1.Node, taints []v1.Taint) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
		"spec":     map[string]any{"taints": taints},
	})
}

// Keep watches the node (an informer on its name) and sets its taints
// whenever Want says they differ, until ctx ends.
func Keep(ctx context.Context, client kubernetes.Interface, nodeName string) error {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", nodeName).String()
		}))
	inf := factory.Core().V1().Nodes().Informer()
	keep := func(obj any) {
		if node, ok := obj.(*v1.Node); ok {
			if err := Reconcile(ctx, client, node); err != nil {
				klog.FromContext(ctx).Error(err, "Keeping the xgn taint", "node", nodeName)
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    keep,
		UpdateFunc: func(_, obj any) { keep(obj) },
	}); err != nil {
		return fmt.Errorf("watching node %s for the xgn taint: %w", nodeName, err)
	}
	factory.Start(ctx.Done())
	return nil
}

// Reconcile sets the node's taints to Want's, if they differ.
func Reconcile(ctx context.Context, client kubernetes.Interface, node *v1.Node) error {
	taints, changed := Want(node)
	if !changed {
		return nil
	}
	patch, err := Patch(node, taints)
	if err != nil {
		return err
	}
	if _, err := client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "qgpu-agent"}); err != nil {
		return fmt.Errorf("setting the taints of node %s: %w", node.Name, err)
	}
	klog.FromContext(ctx).Info("xgn taint set", "node", node.Name, "xgn", node.Labels[LabelAllocMode] == ModeXGN)
	return nil
}
