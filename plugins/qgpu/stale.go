package qgpu

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// staleClaims takes back, off the scheduling goroutine, the allocations a
// cycle that never bound its pod left behind (the scheduler died between
// PreBind and Bind, or before Unreserve finished). PreFilter only reports
// such a claim (request.AllocatedClaimError.Stale, read from the informers);
// whether the pod is really unbound is decided here, from the API server:
// after a failover the new leader's informer may not have seen a Bind that
// happened, and the claim of a bound pod is never taken back (the kubelet
// could not prepare it), as upstream's scheduler never deallocates one.
//
// One key per claim and pod: a pod retried every cycle queues one release,
// not one goroutine per cycle. A failed release is retried with backoff a
// few times; the pod's next cycle queues it again after that.
type staleClaims struct {
	p     *QGPU
	ctx   context.Context
	queue workqueue.TypedRateLimitingInterface[staleKey]
	start sync.Once
	// handled counts the keys done with (released, kept or given up), for
	// tests that wait for the worker.
	handled atomic.Int64
}

// staleKey is one claim left allocated for one pod.
type staleKey struct {
	ref request.ClaimRef
	// share is the stale allocation's share ID: a newer allocation of
	// the claim is not taken back.
	share  types.UID
	pod    string
	podUID types.UID
}

const staleRetries = 5

func newStaleClaims(ctx context.Context, p *QGPU) *staleClaims {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[staleKey](100*time.Millisecond, 10*time.Second),
		workqueue.TypedRateLimitingQueueConfig[staleKey]{Name: "qgpu-stale-claims"})
	context.AfterFunc(ctx, q.ShutDown)
	return &staleClaims{p: p, ctx: ctx, queue: q}
}

// add queues the release of a stale allocation for pod.
func (s *staleClaims) add(stale *request.AllocatedClaimError, pod *v1.Pod) {
	s.start.Do(func() { go wait.UntilWithContext(s.ctx, s.work, time.Second) })
	s.queue.Add(staleKey{ref: stale.Ref, share: stale.Share, pod: pod.Name, podUID: pod.UID})
}

func (s *staleClaims) work(ctx context.Context) {
	for {
		k, quit := s.queue.Get()
		if quit {
			return
		}
		err := s.release(ctx, k)
		switch {
		case err == nil:
			s.queue.Forget(k)
		case s.queue.NumRequeues(k) < staleRetries:
			klog.FromContext(ctx).V(2).Info("Releasing a qGPU claim a dead cycle left allocated; will retry", "claim", klog.KRef(k.ref.Namespace, k.ref.Name), "err", err)
			s.queue.AddRateLimited(k)
		default:
			klog.FromContext(ctx).Error(err, "Releasing a qGPU claim a dead cycle left allocated; the pod's next cycle tries again", "claim", klog.KRef(k.ref.Namespace, k.ref.Name))
			s.queue.Forget(k)
		}
		s.queue.Done(k)
		s.handled.Add(1)
	}
}

// release takes the allocation back unless the API server says the pod is
// bound. A pod that is gone (or whose name a new pod took) cannot be bound
// any more: its allocation is released as the resource-claim controller
// would.
func (s *staleClaims) release(ctx context.Context, k staleKey) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(k.ref.Namespace, k.pod), "claim", klog.KRef(k.ref.Namespace, k.ref.Name))
	pod, err := s.p.handle.ClientSet().CoreV1().Pods(k.ref.Namespace).Get(ctx, k.pod, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case pod.UID == k.podUID && pod.Spec.NodeName != "":
		logger.V(2).Info("Kept a qGPU claim: the API server has its pod bound (the informer had not seen the binding)", "node", pod.Spec.NodeName)
		return nil
	}
	if err := s.p.takeBack(ctx, k.ref, &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: k.podUID}}, sharedAs(k.share)); err != nil {
		return err
	}
	logger.V(2).Info("Released a qGPU claim a dead cycle left allocated")
	return nil
}
