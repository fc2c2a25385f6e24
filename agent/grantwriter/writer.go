// Package grantwriter writes the qgpu.io/grant annotation of the pods the
// agent granted, off the Allocate path: the kubelet waits on Allocate, and a
// slow API server must not stall pod admission (docs/design.md, the agent).
package grantwriter

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/allocate"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Retries is how many times a failed write of one grant is queued again,
// with a per-pod exponential backoff, before the writer leaves it to the
// reconciler (agent/reconcile), which rewrites missing grants.
const Retries = 5

// Backoff bounds: the first retry of a pod's write waits BaseDelay, each
// next one twice as long, up to MaxDelay. Tests shorten them.
var (
	BaseDelay = 200 * time.Millisecond
	MaxDelay  = 10 * time.Second
)

// Writer patches grant annotations through a client-go workqueue keyed by
// pod UID: a pod queued again before its write keeps only its latest grant
// (nothing is dropped, and the queue holds at most one entry per pod of the
// node), a failed write backs off per pod without holding up the others.
type Writer struct {
	client kubernetes.Interface
	queue  workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	pending map[string]job // by pod UID: the latest grant to write
}

type job struct {
	pod   *v1.Pod
	grant *protocol.Assignment
}

// New returns a writer; Run does the writing.
func New(client kubernetes.Interface) *Writer {
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[string](BaseDelay, MaxDelay)
	return &Writer{
		client:  client,
		queue:   workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{Name: "qgpu_grant_writer"}),
		pending: map[string]job{},
	}
}

// Enqueue queues the write of pod's grant without blocking (it has the
// allocate.Allocator's OnPodGranted signature).
func (w *Writer) Enqueue(pod *v1.Pod, grant *protocol.Assignment) {
	uid := string(pod.UID)
	w.mu.Lock()
	w.pending[uid] = job{pod: pod, grant: grant}
	w.mu.Unlock()
	w.queue.Add(uid)
}

// Run writes the queued grants until ctx ends.
func (w *Writer) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	for w.next(ctx) {
	}
}

// next writes one queued grant; false once the queue is shut down.
func (w *Writer) next(ctx context.Context) bool {
	uid, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(uid)
	w.mu.Lock()
	j, ok := w.pending[uid]
	w.mu.Unlock()
	if !ok {
		w.queue.Forget(uid)
		return true
	}
	logger := klog.FromContext(ctx)
	err := allocate.PatchGrant(ctx, w.client, j.pod, j.grant)
	switch {
	case err != nil && !apierrors.IsNotFound(err) && w.queue.NumRequeues(uid) < Retries:
		logger.V(2).Info("Writing the grant; retrying", "pod", klog.KObj(j.pod), "err", err)
		w.queue.AddRateLimited(uid)
		return true
	case apierrors.IsNotFound(err):
		// Deleted meanwhile: nothing to write, and the reconciler drops its record.
		logger.V(2).Info("Pod gone before its grant was written", "pod", klog.KObj(j.pod))
	case err != nil:
		logger.Error(err, "Writing the grant; the reconciler will retry", "pod", klog.KObj(j.pod))
	default:
		logger.V(2).Info("Wrote grant", "pod", klog.KObj(j.pod))
	}
	w.queue.Forget(uid)
	w.mu.Lock()
	if cur, ok := w.pending[uid]; ok && cur.grant == j.grant {
		delete(w.pending, uid) // a newer grant queued meanwhile stays
	}
	w.mu.Unlock()
	return true
}
