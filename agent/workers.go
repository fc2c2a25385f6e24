package agent

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/agent/allocate"
	"github.com/qgpu-scheduler/qgpu/agent/inventory"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// observed counts Allocate outcomes and refreshes the gauges.
type observed struct {
	alloc *allocate.Allocator
	agent *agent
}

func (o *observed) Allocate(ctx context.Context, resource string, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	resp, err := o.alloc.Allocate(ctx, resource, ids)
	o.agent.metrics.ObserveAllocate(resource, err)
	if err == nil {
		o.agent.refreshMetrics()
	}
	return resp, err
}

// grantWriter patches grant annotations off the Allocate path: the kubelet
// waits on Allocate, and a slow API server must not stall pod admission. A
// write that fails (or is dropped when the queue is full) is redone by the
// reconciler, which rewrites missing grants.
type grantWriter struct {
	client kubernetes.Interface
	queue  chan grantJob
}

type grantJob struct {
	pod   *v1.Pod
	grant *protocol.Assignment
}

func newGrantWriter(client kubernetes.Interface) *grantWriter {
	return &grantWriter{client: client, queue: make(chan grantJob, 256)}
}

func (w *grantWriter) enqueue(pod *v1.Pod, grant *protocol.Assignment) {
	select {
	case w.queue <- grantJob{pod: pod, grant: grant}:
	default:
	}
}

func (w *grantWriter) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-w.queue:
			err := retry(ctx, 3, func() error { return allocate.PatchGrant(ctx, w.client, j.pod, j.grant) })
			if apierrors.IsNotFound(err) {
				// Deleted meanwhile: nothing to write, and the reconciler drops its record.
				logger.V(2).Info("Pod gone before its grant was written", "pod", klog.KObj(j.pod))
				continue
			}
			if err != nil {
				logger.Error(err, "Writing the grant; the reconciler will retry", "pod", klog.KObj(j.pod))
			} else {
				logger.V(2).Info("Wrote grant", "pod", klog.KObj(j.pod))
			}
		}
	}
}

// publisher republishes the inventory after health changes; only the latest
// state matters, so triggers coalesce.
type publisher struct {
	client  kubernetes.Interface
	node    string
	tracker *inventory.Tracker
	kick    chan struct{}
	// published, if set, is called with every inventory written.
	published func(*protocol.Inventory)
}

func newPublisher(client kubernetes.Interface, node string, tracker *inventory.Tracker) *publisher {
	return &publisher{client: client, node: node, tracker: tracker, kick: make(chan struct{}, 1)}
}

func (p *publisher) trigger() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *publisher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
			inv := p.tracker.Inventory()
			err := retry(ctx, 5, func() error {
				return inventory.Publish(ctx, p.client, p.node, inv)
			})
			if err != nil {
				klog.FromContext(ctx).Error(err, "Publishing the inventory")
			} else if p.published != nil {
				p.published(inv)
			}
		}
	}
}

// retryBase is the wait after a first failed write; it doubles per attempt.
var retryBase = 200 * time.Millisecond

// retry calls f up to attempts times, retryBase apart and doubling, and
// returns f's last error (ctx's if ctx ended before the first call).
func retry(ctx context.Context, attempts int, f func() error) error {
	var err error
	backoff := wait.Backoff{Duration: retryBase, Factor: 2, Steps: attempts}
	waitErr := wait.ExponentialBackoffWithContext(ctx, backoff, func(context.Context) (bool, error) {
		err = f()
		// A pod that is gone stays gone: retrying would only hold up the
		// writes queued behind it.
		return err == nil || apierrors.IsNotFound(err), nil
	})
	if err == nil {
		return waitErr
	}
	return err
}
