package qgpu

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// The workload (the typical shapes fgd and fragfit score against) is
// learned from every pod bound to a qGPU node, each counted once by UID
// (typical.Learner.ObservePod): Reserve counts the pods this scheduler
// places, and the pod informer every pod seen bound, whoever bound it.
//
// Until 2026-11-27 the informer counted only pods bound after the
// scheduler started and without an assignment, so that the scheduler
// learned from a cold start as the trace replay does. After a restart or a
// failover that left the new leader with no GPU shape at all: the pods
// placed before carry assignments, and a standby replica's informer saw
// the leader's pods bound with theirs. Placement then fell back to the
// fixed node order until enough new pods were placed (docs/performance.md
// #failover-and-the-learned-shapes).

// learnBound counts a pod that was just bound: old unbound, or nil for a
// pod that arrived bound after the informer's initial list (that list is
// counted by learnCluster). A pod this scheduler placed was counted in
// Reserve already, and is not counted again.
func (s *shared) learnBound(old, pod *v1.Pod) {
	if old != nil && old.Spec.NodeName != "" {
		return
	}
	s.learnPod(pod)
}

// learnPod counts a bound, running pod: with a trusted assignment by its
// request as Reserve counted it (resolved on its node's cards if
// relative), without one as a CPU-only shape when its node has cards
// (learnCPUOnly: pods other schedulers place take CPU there too). A pod
// whose assignment or request does not read is not counted. The request
// is read with the first profile's vocabulary settings (parseOpts).
func (s *shared) learnPod(pod *v1.Pod) {
	if pod.Spec.NodeName == "" || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return
	}
	if s.workload.Counted(pod.UID) {
		return // counted in Reserve: the leader's own pods are not parsed again
	}
	raw, ok := pod.Annotations[protocol.AnnotationAssignment]
	if !ok {
		s.learnCPUOnly(pod.UID, pod.Spec.NodeName, podCPU(pod))
		return
	}
	a, err := trustedAssignment(pod, raw)
	if err != nil {
		return
	}
	req, err := request.ParseWith(pod, s.parseOpts)
	if err == nil && req == nil && request.UsesClaims(pod) {
		req = request.FromAssignment(a) // its claims may be released already; the assignment holds the shape
	}
	if err != nil || req == nil {
		return
	}
	if req.Relative() {
		n, known := s.ledger.CopyNode(pod.Spec.NodeName, nil)
		if !known {
			return
		}
		if req, err = req.Resolve(largestCard(req, n), len(n.Cards)); err != nil {
			return
		}
	}
	s.workload.ObservePod(pod.UID, req, podCPU(pod))
}

// learnCluster counts the pods bound before the scheduler started, once
// both informers have synced (so that the ledger knows which nodes have
// cards), and then closes done; PreFilter waits for it as for the
// informers. A pod deleted between the list and its count stays in the
// learner's set of counted pods (a UID, never reported again), as any
// shape of a departed pod stays in the counts.
func (s *shared) learnCluster(ctx context.Context, pods cache.Store, done chan<- struct{}, synced ...cache.InformerSynced) {
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	listed := pods.List()
	for _, obj := range listed {
		if pod, ok := obj.(*v1.Pod); ok {
			s.learnPod(pod)
		}
	}
	s.workload.Publish()
	klog.FromContext(ctx).V(2).Info("Typical qGPU shapes learned from the pods in the cluster", "pods", len(listed))
	close(done)
}

// closed is an InformerSynced that is true once done is closed.
func closed(done <-chan struct{}) cache.InformerSynced {
	return func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}
