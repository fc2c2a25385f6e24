package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// runTopology deletes pods while they are being scheduled, deletes a node
// with pods and re-adds it, and removes a card from an inventory under its
// pods, then restores it.
func runTopology(ctx context.Context, e *env) error {
	n := e.o.pods / 4
	var ferr error
	readd := make(chan error, 1)
	_, err := e.churn(ctx, n, 60, e.o.runTime/2, func(i int) {
		if i%7 == 3 {
			_ = e.delete(ctx, fmt.Sprintf("p-%05d", e.createdCount()-1)) // while being scheduled
		}
		if ferr != nil {
			return
		}
		switch i {
		case n / 4:
			e.logf("node t4-0 deleted after pod %d; re-added in 2 s", i)
			ferr = e.deleteNode(ctx, "t4-0", readd)
		case n / 2:
			e.logf("card 3 removed from the inventory of a100-0 after pod %d", i)
			ferr = e.removeCard(ctx, "a100-0", 3)
		case 3 * n / 4:
			e.logf("inventory of a100-0 restored after pod %d", i)
			ferr = e.setInventory(ctx, "a100-0", e.savedInv)
		}
	})
	if err == nil {
		err = ferr
	}
	if rerr := <-readd; err == nil {
		err = rerr
	}
	if e.savedInv != "" {
		if rerr := e.setInventory(ctx, "a100-0", e.savedInv); err == nil {
			err = rerr
		}
	}
	e.logf("%d pods deleted in total, every 7th right after its creation", e.deleted)
	return err
}

// deleteNode deletes the Node object (its pods stay bound: no pod GC runs
// here) and re-creates it from the saved object 2 s later.
func (e *env) deleteNode(ctx context.Context, name string, done chan<- error) error {
	node, err := e.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := e.cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	go func() {
		time.Sleep(2 * time.Second)
		fresh := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: node.Labels, Annotations: node.Annotations}}
		_, err := e.cs.CoreV1().Nodes().Create(ctx, fresh, metav1.CreateOptions{})
		e.logf("node %s re-added (err %v)", name, err)
		done <- err
	}()
	return nil
}

func (e *env) removeCard(ctx context.Context, node string, index int) error {
	n, inv, err := e.inventory(ctx, node)
	if err != nil {
		return err
	}
	e.savedInv = n.Annotations[protocol.AnnotationInventory]
	kept := inv.Cards[:0]
	for _, c := range inv.Cards {
		if c.Index != index {
			kept = append(kept, c)
		}
	}
	inv.Cards = kept
	v, err := inv.Encode()
	if err != nil {
		return err
	}
	return e.setInventory(ctx, node, v)
}

func (e *env) setInventory(ctx context.Context, node, value string) error {
	patch := mergePatch(map[string]any{"metadata": map[string]any{"annotations": map[string]string{protocol.AnnotationInventory: value}}})
	_, err := e.cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func (e *env) createdCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.created
}
