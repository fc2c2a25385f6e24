package qgpu

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// reasonBindUncertain is PreFilter's for a pod whose last binding has an
// unknown outcome (docs/ledger.md#a-binding-with-an-unknown-outcome).
const reasonBindUncertain = "the pod's last binding has an unknown outcome; waiting for the API to show whether it was written"

// bindOutcome is what a binding call that returned an error did.
type bindOutcome int

const (
	// bindRefused: the binding was not written and never will be, so the
	// framework's Unreserve may free the slices.
	bindRefused bindOutcome = iota
	// bindWritten: the pod is bound with the assignment.
	bindWritten
	// bindUnknown: neither could be shown in time.
	bindUnknown
)

// readBack paces the reads of a pod whose binding has an unknown outcome:
// six reads over about three seconds, within readBackTimeout and the
// context. Long enough for a connection to come back or an apiserver
// replica to answer; short, as the binding goroutine waits meanwhile.
var readBack = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 6}

const readBackTimeout = 5 * time.Second

// bindOutcome reads the pod back after a failed binding call, as the call
// can fail after the apiserver wrote the binding (its response lost) or
// while the write is still under way. A read decides when it shows the pod
// bound, or shows that the binding can no longer be written (readBinding);
// else a refusal (refusedUnwritten) is a refusal, and any other error is
// retried, then left unknown.
func (p *QGPU) bindOutcome(ctx context.Context, pod *v1.Pod, nodeName, assignment string, callErr error) bindOutcome {
	refused := refusedUnwritten(callErr)
	backoff := readBack
	if refused {
		// One read, for a binding that an earlier try of the same call
		// wrote (client-go retries a 5xx or 429 with Retry-After).
		backoff.Steps = 1
	}
	ctx, cancel := context.WithTimeout(ctx, readBackTimeout)
	defer cancel()
	outcome := bindUnknown
	_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		outcome = p.readBinding(ctx, pod, nodeName, assignment)
		return outcome != bindUnknown, nil
	})
	if outcome == bindUnknown && refused {
		return bindRefused
	}
	return outcome
}

// refusedUnwritten reports whether err is the apiserver's definite answer
// that it did not write the binding: a 4xx it sends before it writes
// anything (400, 401, 403 from RBAC or an admission policy, 404 the pod is
// gone, 405, 413, 415, 422). Every other error leaves the outcome unknown:
//   - no answer (a timeout, a connection reset, the context ending): the
//     request may have been carried out;
//   - 5xx: a 500 can be an etcd timeout after which the write still
//     commits, and a 504 is the apiserver's own timeout, its handler
//     carrying on;
//   - 408 and 429: a timeout, and a throttle that may answer client-go's
//     retry of a request whose first try was written;
//   - 409: pods/binding turns every storage error of its own into a
//     Conflict, a storage timeout included. A real conflict (the version
//     precondition, "already assigned", a pod being deleted) leaves a trace
//     a read sees, the pod at a newer version or bound, so the read decides.
func refusedUnwritten(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code >= 400 && code < 500 && code != 408 && code != 409 && code != 429
}

// readBinding reads the pod once and tells what the binding did, when the
// read shows it.
func (p *QGPU) readBinding(ctx context.Context, pod *v1.Pod, nodeName, assignment string) bindOutcome {
	cur, err := p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return bindRefused // the pod is gone, and holds nothing
	case err != nil:
		return bindUnknown
	case cur.UID != pod.UID:
		return bindRefused // re-created: the binding's UID precondition fails
	case cur.Spec.NodeName == nodeName && cur.Annotations[protocol.AnnotationAssignment] == assignment:
		return bindWritten
	case cur.Spec.NodeName != "":
		return bindRefused // bound by another binding: a pod is bound once
	case newerVersion(cur, pod):
		return bindRefused // written since without the binding: its version precondition fails
	}
	return bindUnknown // unbound at the binding's version: the binding may still be written
}

// holdUncertain keeps the slices of a binding with an unknown outcome held
// through the framework's Unreserve (ledger.MarkUncertain) until the
// informer shows what the binding did (shared.settle, Observe) or the pod
// goes. It then settles against the informer's cache once: the handler may
// have seen the pod at a newer version before the mark, with nothing to free.
func (p *QGPU) holdUncertain(ctx context.Context, pod *v1.Pod, nodeName string) {
	logger := klog.FromContext(ctx)
	since, ok := podVersion(pod)
	if !ok {
		// No version the binding was conditioned on: only the pod seen bound,
		// or gone, settles it.
		since = math.MaxUint64
	}
	if !p.ledger.MarkUncertain(pod.UID, nodeName, since) {
		return
	}
	logger.V(2).Info("Binding outcome unknown; the pod's qGPU slices stay held until the API shows it", "pod", klog.KObj(pod), "node", nodeName)
	if !p.live {
		return
	}
	cached, err := p.handle.SharedInformerFactory().Core().V1().Pods().Lister().Pods(pod.Namespace).Get(pod.Name)
	if err == nil && cached.UID == pod.UID && cached.Spec.NodeName == "" {
		p.shared.settle(logger, cached)
	}
}

// podVersion is the pod's resourceVersion as a number. The API calls it
// opaque; the apiserver's etcd3 storage sets it to the etcd revision of the
// pod's last write, which only grows. A version that is not a number is
// never newer, which keeps slices held rather than freeing them.
func podVersion(pod *v1.Pod) (uint64, bool) {
	v, err := strconv.ParseUint(pod.ResourceVersion, 10, 64)
	return v, err == nil
}

// newerVersion reports whether cur is a later version of pod.
func newerVersion(cur, pod *v1.Pod) bool {
	c, okCur := podVersion(cur)
	v, okPod := podVersion(pod)
	return okCur && okPod && c > v
}
