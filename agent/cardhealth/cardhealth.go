// Package cardhealth shows a card's health on the pods that hold a slice
// of it: the pod condition qgpu.io/CardHealthy, False (reason
// CardUnhealthy, the message naming the card and NVML's finding) while one
// of the pod's cards is unhealthy, True again once they all are healthy.
// A pod whose cards never failed gets no condition: a node of many GPU
// pods writes nothing while its cards are well.
//
// Both of the agent's modes use it: the device plugins' grants and the DRA
// claims' give the pods' cards. The kubelet's own DRA health reporting
// (ResourceHealthStatus, containerStatuses[].allocatedResourcesStatus) is
// alpha and off by default in Kubernetes 1.35; this condition needs no
// gate (docs/dra.md#card-health).
package cardhealth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ConditionType is the pod condition the agent writes.
const ConditionType v1.PodConditionType = "qgpu.io/CardHealthy"

// Reasons of the condition.
const (
	ReasonUnhealthy = "CardUnhealthy"
	ReasonHealthy   = "CardHealthy"
)

// Reporter keeps the condition of the node's pods in step with their
// cards' health.
type Reporter struct {
	Client kubernetes.Interface
	// Pods are the pods bound to the node (the agent's informer).
	Pods func() ([]*v1.Pod, error)
	// Grants are the slices the node's pods hold (device-plugin grants, or
	// the prepared claims' as grants).
	Grants func(pods []*v1.Pod) ([]store.Grant, error)
	// Cards are the node's cards with their health; Why says why an
	// unhealthy one is.
	Cards func() []protocol.Card
	Why   func(uuid string) string
	// Now stamps lastTransitionTime; time.Now when nil.
	Now func() time.Time
	// Also runs after every pass of Run (the DRA claims' device status);
	// nil: nothing.
	Also func(ctx context.Context) error

	once    sync.Once
	trigger chan struct{}
}

// Trigger asks Run for a pass soon (a card's health changed); it never blocks.
func (r *Reporter) Trigger() {
	select {
	case r.triggers() <- struct{}{}:
	default:
	}
}

func (r *Reporter) triggers() chan struct{} {
	r.once.Do(func() { r.trigger = make(chan struct{}, 1) })
	return r.trigger
}

// Run writes the conditions at every trigger and every interval (a pod
// that started on a card since, a write that failed) until ctx ends.
func (r *Reporter) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := r.Sync(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Writing the card-health condition of the node's pods; the next pass tries again")
		}
		if r.Also != nil {
			if err := r.Also(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Writing card health; the next pass tries again")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-r.triggers():
		case <-t.C:
		}
	}
}

// Sync writes the condition of every pod whose condition is not what its
// cards' health says.
func (r *Reporter) Sync(ctx context.Context) error {
	pods, err := r.Pods()
	if err != nil {
		return fmt.Errorf("listing the node's pods: %w", err)
	}
	grants, err := r.Grants(pods)
	if err != nil {
		return fmt.Errorf("listing the node's grants: %w", err)
	}
	held := map[string]map[string]bool{} // pod UID → card UUIDs
	for _, g := range grants {
		for _, s := range g.Slices {
			if held[g.PodUID] == nil {
				held[g.PodUID] = map[string]bool{}
			}
			held[g.PodUID][s.UUID] = true
		}
	}
	cards := r.Cards()
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	var errs []error
	for _, pod := range pods {
		if len(held[string(pod.UID)]) == 0 || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			continue
		}
		want := Desired(pod, Held(cards, held[string(pod.UID)]), r.Why, now())
		if want == nil {
			continue
		}
		if err := r.write(ctx, pod, *want); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.FromContext(ctx).V(2).Info("Card-health condition written", "pod", klog.KObj(pod), "status", want.Status, "message", want.Message)
	}
	return errors.Join(errs...)
}

// Held are the cards, by index, whose UUID is in uuids.
func Held(cards []protocol.Card, uuids map[string]bool) []protocol.Card {
	var out []protocol.Card
	for _, c := range cards {
		if uuids[c.UUID] {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b protocol.Card) int { return a.Index - b.Index })
	return out
}

// Desired is the condition to write on pod, which holds slices of cards;
// nil when the pod's condition is already right, or when all its cards
// are healthy and it never had the condition.
func Desired(pod *v1.Pod, cards []protocol.Card, why func(string) string, now time.Time) *v1.PodCondition {
	var sick []string
	var names []string
	for _, c := range cards {
		name := fmt.Sprintf("card %d (%s)", c.Index, c.UUID)
		names = append(names, name)
		if !c.Healthy {
			reason := "unhealthy"
			if why != nil && why(c.UUID) != "" {
				reason = why(c.UUID)
			}
			sick = append(sick, name+": "+reason)
		}
	}
	if len(names) == 0 {
		return nil
	}
	want := v1.PodCondition{Type: ConditionType, Status: v1.ConditionTrue, Reason: ReasonHealthy,
		Message: "healthy: " + strings.Join(names, ", ")}
	if len(sick) > 0 {
		want.Status, want.Reason = v1.ConditionFalse, ReasonUnhealthy
		want.Message = "unhealthy: " + strings.Join(sick, "; ") +
			" (the card takes no new pod or claim; this pod's work on it may fail)"
	}
	have := condition(pod)
	switch {
	case have == nil && want.Status == v1.ConditionTrue:
		return nil
	case have != nil && have.Status == want.Status && have.Reason == want.Reason && have.Message == want.Message:
		return nil
	case have != nil && have.Status == want.Status:
		want.LastTransitionTime = have.LastTransitionTime
	default:
		want.LastTransitionTime = metav1.NewTime(now)
	}
	return &want
}

func condition(pod *v1.Pod) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == ConditionType {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// write patches the condition into the pod's status (a strategic merge:
// the other conditions stay), only while the pod is the one read (its
// UID); a pod gone since is no error.
func (r *Reporter) write(ctx context.Context, pod *v1.Pod, c v1.PodCondition) error {
	patch, err := ConditionPatch(pod.UID, c)
	if err != nil {
		return err
	}
	_, err = r.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{FieldManager: "qgpu-agent"}, "status")
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pod %s/%s: patching condition %s: %w", pod.Namespace, pod.Name, ConditionType, err)
	}
	return nil
}

// ConditionPatch is the strategic merge patch that sets condition c on the
// pod with uid (a precondition: another pod of the same name is left alone).
func ConditionPatch(uid types.UID, c v1.PodCondition) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid},
		"status":   map[string]any{"conditions": []v1.PodCondition{c}},
	})
}
