package dra

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Claim device status (the DRAResourceClaimDeviceStatus feature gate, beta
// and on by default since 1.33): the health of a prepared claim's card as
// a condition of the claim's status.devices entry for it, the same
// condition the pods get (agent/cardhealth), so that whoever looks at the
// claim sees it too. Written as the pods' is: False while the card is
// unhealthy, True once it heals, nothing for a claim whose card never
// failed. An API server that drops the field (the gate off) stops the
// writes until the agent restarts.

// DeviceCondition is the condition type of a claim's device entry.
const DeviceCondition = "qgpu.io/CardHealthy"

// Reasons of DeviceCondition, as the pods' condition's.
const (
	DeviceReasonUnhealthy = "CardUnhealthy"
	DeviceReasonHealthy   = "CardHealthy"
)

// DeviceStatus writes DeviceCondition into the prepared claims.
type DeviceStatus struct {
	Client   kubernetes.Interface
	Node     string
	Prepared func() []Prepared
	Cards    func() []protocol.Card
	Why      func(uuid string) string
	Now      func() time.Time

	mu      sync.Mutex
	checked map[types.UID]bool // read once since the start
	marked  map[types.UID]bool // carries the condition
	dropped bool
}

// Sync writes the condition of every prepared claim whose card's health
// differs from what the claim says. A claim is read from the API server
// once after the start, and then only while it holds an unhealthy card or
// carries the condition.
func (w *DeviceStatus) Sync(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dropped {
		return nil
	}
	if w.checked == nil {
		w.checked, w.marked = map[types.UID]bool{}, map[types.UID]bool{}
	}
	cards := map[int]protocol.Card{}
	for _, c := range w.Cards() {
		cards[c.Index] = c
	}
	var errs []error
	for _, p := range w.Prepared() {
		if w.checked[p.UID] && !w.marked[p.UID] && !holdsUnhealthy(p, cards) {
			continue
		}
		marked, err := w.write(ctx, p, cards)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		w.checked[p.UID], w.marked[p.UID] = true, marked
		if w.dropped {
			klog.FromContext(ctx).Info("The API server dropped the claims' device status (is DRAResourceClaimDeviceStatus off?); card health goes to the pods' condition only",
				"claim", klog.KRef(p.Namespace, p.Name))
			return nil
		}
	}
	return errors.Join(errs...)
}

func holdsUnhealthy(p Prepared, cards map[int]protocol.Card) bool {
	for _, r := range p.Requests {
		for _, s := range r.Slices {
			if c, ok := cards[s.Index]; ok && !c.Healthy {
				return true
			}
		}
	}
	return false
}

// write updates the claim's device entries of this node's cards and
// reports whether the claim carries the condition now.
func (w *DeviceStatus) write(ctx context.Context, p Prepared, cards map[int]protocol.Card) (bool, error) {
	api := w.Client.ResourceV1().ResourceClaims(p.Namespace)
	marked := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		claim, err := api.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if claim.UID != p.UID || claim.Status.Allocation == nil {
			return nil // gone or re-created: the kubelet unprepares it
		}
		var changed bool
		claim.Status.Devices, changed, marked = w.devices(claim, cards)
		if !changed {
			return nil
		}
		stored, err := api.UpdateStatus(ctx, claim, metav1.UpdateOptions{FieldManager: "qgpu-agent"})
		if err != nil {
			return err
		}
		w.dropped = len(stored.Status.Devices) == 0 && len(claim.Status.Devices) > 0
		return nil
	})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim %s/%s: writing its device status: %w", p.Namespace, p.Name, err)
	}
	return marked, nil
}

// devices is the claim's status.devices with this node's entries' condition
// as their cards' health says; changed when it differs from the claim's.
func (w *DeviceStatus) devices(claim *resourceapi.ResourceClaim, cards map[int]protocol.Card) (out []resourceapi.AllocatedDeviceStatus, changed, marked bool) {
	out = append(out, claim.Status.Devices...)
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		index, ok := protocol.DRADeviceIndex(r.Device)
		card, known := cards[index]
		if r.Driver != protocol.DRADriver || r.Pool != w.Node || !ok || !known {
			continue
		}
		i := entryOf(out, r)
		have := (*metav1.Condition)(nil)
		if i >= 0 {
			have = apimeta.FindStatusCondition(out[i].Conditions, DeviceCondition)
		}
		want := deviceCondition(card, w.Why, now())
		if have == nil && want.Status == metav1.ConditionTrue {
			continue
		}
		marked = marked || want.Status == metav1.ConditionFalse
		if have != nil && have.Status == want.Status && have.Reason == want.Reason && have.Message == want.Message {
			continue
		}
		if i < 0 {
			e := resourceapi.AllocatedDeviceStatus{Driver: r.Driver, Pool: r.Pool, Device: r.Device}
			if r.ShareID != nil {
				e.ShareID = (*string)(r.ShareID)
			}
			out = append(out, e)
			i = len(out) - 1
		}
		out[i].Conditions = append([]metav1.Condition(nil), out[i].Conditions...)
		apimeta.SetStatusCondition(&out[i].Conditions, want)
		changed = true
	}
	return out, changed, marked
}

// entryOf is the index of result r's entry in devices, -1 if none.
func entryOf(devices []resourceapi.AllocatedDeviceStatus, r resourceapi.DeviceRequestAllocationResult) int {
	for i, d := range devices {
		share := ""
		if d.ShareID != nil {
			share = *d.ShareID
		}
		want := ""
		if r.ShareID != nil {
			want = string(*r.ShareID)
		}
		if d.Driver == r.Driver && d.Pool == r.Pool && d.Device == r.Device && share == want {
			return i
		}
	}
	return -1
}

func deviceCondition(c protocol.Card, why func(string) string, now time.Time) metav1.Condition {
	name := fmt.Sprintf("card %d (%s)", c.Index, c.UUID)
	if c.Healthy {
		return metav1.Condition{Type: DeviceCondition, Status: metav1.ConditionTrue, Reason: DeviceReasonHealthy,
			Message: "healthy: " + name, LastTransitionTime: metav1.NewTime(now)}
	}
	reason := "unhealthy"
	if why != nil && why(c.UUID) != "" {
		reason = why(c.UUID)
	}
	return metav1.Condition{Type: DeviceCondition, Status: metav1.ConditionFalse, Reason: DeviceReasonUnhealthy,
		Message: "unhealthy: " + name + ": " + reason, LastTransitionTime: metav1.NewTime(now)}
}
