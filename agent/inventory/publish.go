package inventory

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Publish writes inv as the inventory annotation of node with a merge patch,
// which touches nothing else on the Node and needs no resourceVersion.
func Publish(ctx context.Context, client kubernetes.Interface, node string, inv *protocol.Inventory) error {
	value, err := inv.Encode()
	if err != nil {
		return fmt.Errorf("encoding inventory: %w", err)
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{protocol.AnnotationInventory: value}},
	})
	if err != nil {
		return err
	}
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "qgpu-agent"}); err != nil {
		return fmt.Errorf("patching node %s with the inventory: %w", node, err)
	}
	klog.FromContext(ctx).V(2).Info("Published inventory", "node", node, "cards", len(inv.Cards))
	return nil
}

// Remove removes the inventory annotation from node (an agent in DRA mode
// publishes ResourceSlices instead: a leftover inventory would offer the
// node's cards to pods of the device-plugin path, which it no longer
// serves). A Node without it is left untouched.
func Remove(ctx context.Context, client kubernetes.Interface, node string) error {
	patch := []byte(`{"metadata":{"annotations":{"` + protocol.AnnotationInventory + `":null}}}`)
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "qgpu-agent"}); err != nil {
		return fmt.Errorf("removing the inventory from node %s: %w", node, err)
	}
	return nil
}
