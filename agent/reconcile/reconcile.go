// Package reconcile periodically compares the agent's grant records with the
// API server (pods gone, grant annotations) and with the kubelet's PodResources
// API (which devices each container really holds), corrects what differs and
// reports it as Events on the pods.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/allocate"
	"github.com/qgpu-scheduler/qgpu/agent/podresources"
	"github.com/qgpu-scheduler/qgpu/agent/store"
)

// Event reasons on pods.
const (
	ReasonGrantWritten   = "QGPUGrantWritten"
	ReasonGrantRewritten = "QGPUGrantRewritten"
	ReasonGrantMoved     = "QGPUGrantMismatch"
	ReasonUnknownDevices = "QGPUUnrecordedDevices"
	// ReasonGrantRecovered: the kubelet lists devices the store had lost the
	// record of, and the record was put back from the pod.
	ReasonGrantRecovered = "QGPUGrantRecovered"
)

// Reconciler holds what one pass needs.
type Reconciler struct {
	Node         string
	Client       kubernetes.Interface
	Store        *store.Store
	Pods         allocate.PodSource
	PodResources podresources.Lister // nil: skip the kubelet comparison
	// Exclusive, when set, is held while the records are read, compared
	// with the kubelet's list and corrected: the Allocator's
	// (Allocator.Exclusive), so no call is answered and recorded in
	// between. Without it a record written after the read but listed by
	// the kubelet was missed, and a stale record of equal devices moved
	// over it (docs/reliability.md, History of 2026-11-27). It is held
	// through the kubelet's List (up to about 0.6 s of retries while the
	// kubelet rate-limits): Allocate calls wait that long, as they would
	// on their own List.
	Exclusive sync.Locker
	Recorder  record.EventRecorder
	// OnChange runs after every pass (metrics refresh).
	OnChange func()
}

// Result counts what one pass did.
type Result struct {
	Dropped   int // grants of pods that are gone or terminal
	Moved     int // grants moved to the container the kubelet gave the devices to
	Unknown   int // containers holding devices with no record that could not be recovered
	Recovered int // records put back for devices the kubelet lists
	Written   int // grant annotations written (missing or wrong)
	Rewritten int // of which were wrong
}

// Run reconciles now and then every interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if res, err := r.Once(ctx); err != nil {
			logger.Error(err, "Reconcile pass failed")
		} else if res != (Result{}) {
			logger.Info("Reconciled", "dropped", res.Dropped, "moved", res.Moved, "unknown", res.Unknown, "recovered", res.Recovered, "written", res.Written, "rewritten", res.Rewritten)
		}
	}, interval)
}

// Once runs one pass.
func (r *Reconciler) Once(ctx context.Context) (Result, error) {
	var res Result
	if r.OnChange != nil {
		defer r.OnChange()
	}
	listedAt := time.Now()
	pods, err := r.Pods.Fresh(ctx)
	if err != nil {
		return res, err
	}
	byUID := map[string]*v1.Pod{}
	for _, p := range pods {
		if p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
			byUID[string(p.UID)] = p
		}
	}
	if res.Dropped, err = r.dropGone(byUID, listedAt); err != nil {
		return res, err
	}
	// Without the kubelet's answer the records cannot be compared with what
	// it holds, but the grants the records show are still written: a
	// rate-limited List must not leave a served pod unannotated.
	var kubeletErr error
	if r.PodResources != nil {
		if err := r.compareKubelet(ctx, byUID, &res); err != nil && !podresources.Absent(err) {
			kubeletErr = fmt.Errorf("comparing with the kubelet's PodResources: %w", err)
		}
	}
	return res, errors.Join(kubeletErr, r.writeGrants(ctx, byUID, &res))
}

// dropGone deletes the records of pods that are not alive in the list
// taken at listedAt. A record granted after that is not judged by it: its
// pod was bound after the list was read (a pod is bound before the
// kubelet asks for its devices), and dropping it would hand its slice out
// again.
func (r *Reconciler) dropGone(alive map[string]*v1.Pod, listedAt time.Time) (int, error) {
	grants, err := r.Store.List()
	if err != nil {
		return 0, err
	}
	n := 0
	done := map[string]bool{}
	for _, g := range grants {
		if alive[g.PodUID] != nil || done[g.PodUID] || !g.GrantedAt.Before(listedAt) {
			continue
		}
		done[g.PodUID] = true
		k, err := r.Store.DeletePod(g.PodUID)
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// writeGrants writes the grant annotation of every fully granted pod whose
// annotation is missing or differs from the records.
func (r *Reconciler) writeGrants(ctx context.Context, alive map[string]*v1.Pod, res *Result) error {
	grants, err := r.Store.List()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var errs []error
	for _, g := range grants {
		pod := alive[g.PodUID]
		if pod == nil || seen[g.PodUID] {
			continue
		}
		seen[g.PodUID] = true
		a, err := allocate.AssignmentOf(pod, r.Node)
		if err != nil {
			continue
		}
		want, complete := allocate.BuildGrant(pod, a, r.Node, grants)
		if !complete {
			continue
		}
		have, err := allocate.GrantOf(pod)
		if err == nil && have != nil && equality.Semantic.DeepEqual(have, want) {
			continue
		}
		if err := allocate.PatchGrant(ctx, r.Client, pod, want); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Written++
		if have != nil || err != nil {
			res.Rewritten++
			r.event(pod, v1.EventTypeWarning, ReasonGrantRewritten, "grant annotation was wrong; rewritten from the agent's records")
		} else {
			r.event(pod, v1.EventTypeNormal, ReasonGrantWritten, "grant annotation was missing; written from the agent's records")
		}
	}
	return errors.Join(errs...)
}

func (r *Reconciler) event(pod *v1.Pod, typ, reason, msg string) {
	if r.Recorder != nil {
		r.Recorder.Event(pod, typ, reason, msg)
	}
}
