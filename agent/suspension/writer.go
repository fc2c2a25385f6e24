// Package suspension writes the priority controller's freezes onto the
// offline pods as the qgpu.io/suspended annotation (docs/priority.md), at
// most once per pod per interval, so that the API server does not see each
// of the many freezes a second a busy online pod can cause.
package suspension

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/qgpu-scheduler/qgpu/agent/priority"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Every is the least time between two writes of a pod's annotation.
const Every = time.Second

// finalWriteTimeout bounds the last writes after the controller stopped.
const finalWriteTimeout = 3 * time.Second

// Writer shows the priority controller's freezes on the offline pods as
// protocol.AnnotationSuspended. It implements priority.PodReporter: the
// controller only records the wanted state; Run writes it, only on change
// and at most once per Every per pod, coalescing what happened in between,
// so the last state is always the one written.
type Writer struct {
	client kubernetes.Interface
	every  time.Duration
	clock  clock.Clock
	kick   chan struct{}

	mu   sync.Mutex
	pods map[string]*mark // by pod UID
}

type mark struct {
	namespace, name string
	want, written   string // annotation values, "" for none
	last            time.Time
}

var _ priority.PodReporter = (*Writer)(nil)

// New returns a writer that writes through client; Run does the writing.
func New(client kubernetes.Interface) *Writer {
	return &Writer{client: client, every: Every, clock: clock.RealClock{}, kick: make(chan struct{}, 1), pods: map[string]*mark{}}
}

// PodSuspended implements priority.PodReporter.
func (w *Writer) PodSuspended(pod priority.PodRef, suspended bool, at time.Time) {
	w.mu.Lock()
	m := w.pods[pod.UID]
	if m == nil {
		m = &mark{namespace: pod.Namespace, name: pod.Name}
		w.pods[pod.UID] = m
	}
	m.want = ""
	if suspended {
		m.want = protocol.Suspension{Since: at.UTC().Truncate(time.Millisecond)}.Encode()
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// ClearStale takes over the annotations a previous agent left on the
// node's pods: none is frozen yet, so all are removed (the controller marks
// again what it freezes).
func (w *Writer) ClearStale(pods []*v1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range pods {
		if v, ok := p.Annotations[protocol.AnnotationSuspended]; ok {
			w.pods[string(p.UID)] = &mark{namespace: p.Namespace, name: p.Name, written: v + "\x00stale"}
		}
	}
}

// Run writes until done is closed, then writes what is still pending once
// more (the controller thaws everything as it stops) within a few seconds.
func (w *Writer) Run(ctx context.Context, done <-chan struct{}) {
	timer := w.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := w.flush(ctx, w.clock.Now(), false)
		if next > 0 {
			timer.Reset(next)
		}
		select {
		case <-done:
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteTimeout)
			defer cancel()
			w.flush(final, w.clock.Now(), true)
			return
		case <-w.kick:
		case <-timer.C():
		}
	}
}

// flush writes every pod whose annotation differs from what it wants and
// whose last write is at least every ago (any, if all), and returns how
// long until the next one is due (0: none pending).
func (w *Writer) flush(ctx context.Context, now time.Time, all bool) time.Duration {
	type job struct {
		uid string
		m   mark
	}
	var jobs []job
	var next time.Duration
	w.mu.Lock()
	for uid, m := range w.pods {
		switch wait := w.every - now.Sub(m.last); {
		case m.want == m.written:
			if m.want == "" && wait <= 0 {
				delete(w.pods, uid) // nothing to show, and no write to space out
			}
		case wait <= 0 || all:
			jobs = append(jobs, job{uid, *m})
			m.last = now
		case next == 0 || wait < next:
			next = wait
		}
	}
	w.mu.Unlock()
	for _, j := range jobs {
		err := patchSuspended(ctx, w.client, j.uid, j.m.namespace, j.m.name, j.m.want)
		w.mu.Lock()
		if m := w.pods[j.uid]; m != nil {
			switch {
			case err == nil:
				m.written = j.m.want
			case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
				delete(w.pods, j.uid) // the pod is gone (or another pod took its name)
			default:
				klog.FromContext(ctx).V(2).Info("Writing the suspended annotation; retrying", "pod", klog.KRef(j.m.namespace, j.m.name), "err", err)
				if next == 0 || w.every < next {
					next = w.every
				}
			}
		}
		w.mu.Unlock()
	}
	return next
}

// patchSuspended sets (value != "") or removes the annotation; the uid
// makes the patch fail with a conflict if the name now belongs to another pod.
func patchSuspended(ctx context.Context, client kubernetes.Interface, uid, namespace, name, value string) error {
	var v any
	if value != "" {
		v = value
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": uid, "annotations": map[string]any{protocol.AnnotationSuspended: v},
	}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "qgpu-agent"})
	return err
}
