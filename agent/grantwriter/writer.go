// Package grantwriter writes the qgpu.io/grant annotation of the pods the
// agent granted, off the Allocate path: the kubelet waits on Allocate, and a
// slow API server must not stall pod admission (docs/design.md, the agent).
package grantwriter

import (
	"context"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/allocate"
	"github.com/qgpu-scheduler/qgpu/agent/internal/apiretry"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// QueueLength bounds the writes waiting; past it Enqueue drops the write.
const QueueLength = 256

// attempts is how many times one grant is written before the writer leaves
// it to the reconciler.
const attempts = 3

// Writer patches grant annotations in the order they were granted. A write
// that fails, or is dropped because the queue is full, is redone by the
// reconciler (agent/reconcile), which rewrites missing grants.
type Writer struct {
	client kubernetes.Interface
	queue  chan job
}

type job struct {
	pod   *v1.Pod
	grant *protocol.Assignment
}

// New returns a writer; Run does the writing.
func New(client kubernetes.Interface) *Writer {
	return &Writer{client: client, queue: make(chan job, QueueLength)}
}

// Enqueue queues the write of pod's grant without blocking (it has the
// allocate.Allocator's OnPodGranted signature).
func (w *Writer) Enqueue(pod *v1.Pod, grant *protocol.Assignment) {
	select {
	case w.queue <- job{pod: pod, grant: grant}:
	default:
	}
}

// Run writes the queued grants until ctx ends.
func (w *Writer) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-w.queue:
			err := apiretry.Do(ctx, attempts, func() error { return allocate.PatchGrant(ctx, w.client, j.pod, j.grant) })
			switch {
			case apierrors.IsNotFound(err):
				// Deleted meanwhile: nothing to write, and the reconciler drops its record.
				logger.V(2).Info("Pod gone before its grant was written", "pod", klog.KObj(j.pod))
			case err != nil:
				logger.Error(err, "Writing the grant; the reconciler will retry", "pod", klog.KObj(j.pod))
			default:
				logger.V(2).Info("Wrote grant", "pod", klog.KObj(j.pod))
			}
		}
	}
}
