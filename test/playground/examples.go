package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// LabelExpect marks examples that must be rejected: the playground applies
// the shipped admission policies, so each is refused at its creation.
const (
	LabelExpect    = "examples.qgpu.io/expect"
	ExpectRejected = "rejected"
)

// example is one example pod and what became of it.
type example struct {
	Namespace, Name string
	WantRejected    bool

	Node    string
	Phase   corev1.PodPhase
	Granted bool
	// Reason is the latest FailedScheduling message.
	Reason string
	// Refused is the admission policy's message when the apiserver refused
	// to create the pod.
	Refused string
}

// landed reports whether the example ended as expected: bound, Running and
// granted by the agent, or (for a rejected one) refused at creation.
func (e *example) landed() bool {
	if e.WantRejected {
		return e.Refused != ""
	}
	return e.Node != "" && e.Phase == corev1.PodRunning && e.Granted
}

// wrong reports an outcome that waiting cannot fix: a rejected example
// created (the admission policies let it through).
func (e *example) wrong() bool { return e.WantRejected && e.Refused == "" }

// examplePods returns the Pods among objs, in order, with their expectation.
func examplePods(objs []*unstructured.Unstructured) []*example {
	var out []*example
	for _, o := range objs {
		if o.GetKind() != "Pod" {
			continue
		}
		ns := o.GetNamespace()
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		out = append(out, &example{Namespace: ns, Name: o.GetName(), WantRejected: o.GetLabels()[LabelExpect] == ExpectRejected})
	}
	return out
}

// waitExamples polls until every example landed as expected, one went
// wrong, or ctx ends; the examples hold the last observed state.
func waitExamples(ctx context.Context, cs kubernetes.Interface, exs []*example) error {
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		done := true
		for _, e := range exs {
			if e.Refused != "" {
				continue // never created
			}
			if err := observe(ctx, cs, e); err != nil {
				return false, nil
			}
			if e.wrong() {
				return false, fmt.Errorf("pod %s/%s should have been refused at creation but was created", e.Namespace, e.Name)
			}
			done = done && e.landed()
		}
		return done, nil
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("not every example landed as expected: %w", ctx.Err())
	}
	return err
}

func observe(ctx context.Context, cs kubernetes.Interface, e *example) error {
	pod, err := cs.CoreV1().Pods(e.Namespace).Get(ctx, e.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	e.Node, e.Phase = pod.Spec.NodeName, pod.Status.Phase
	_, e.Granted = pod.Annotations[protocol.AnnotationGrant]
	if e.Node != "" && !e.WantRejected {
		return nil
	}
	sel := fields.Set{"involvedObject.name": e.Name, "involvedObject.uid": string(pod.UID), "reason": "FailedScheduling"}.String()
	evs, err := cs.CoreV1().Events(e.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return err
	}
	sort.Slice(evs.Items, func(i, j int) bool { return lastSeen(&evs.Items[i]).Before(lastSeen(&evs.Items[j])) })
	if n := len(evs.Items); n > 0 {
		e.Reason = evs.Items[n-1].Message
	}
	return nil
}

func lastSeen(ev *corev1.Event) time.Time {
	switch {
	case ev.Series != nil:
		return ev.Series.LastObservedTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}
