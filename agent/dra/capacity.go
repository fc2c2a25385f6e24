package dra

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ReasonCapacityDropped is the Warning Event on the Node when the API
// server dropped the consumable-capacity fields of the driver's devices.
const ReasonCapacityDropped = "QGPUDRACapacityDropped"

// FeatureGate is the Kubernetes feature gate the shared devices need.
const FeatureGate = "DRAConsumableCapacity"

// ErrCapacityDropped: the API server stored the node's devices without
// allowMultipleAllocations or a capacity's requestPolicy.
var ErrCapacityDropped = errors.New("the API server dropped the consumable-capacity fields of the node's ResourceSlice (" +
	"enable the " + FeatureGate + " feature gate on kube-apiserver, then restart the agent; its devices are withdrawn; docs/dra.md)")

// errNotReadBack: the published devices are not in the API server yet.
var errNotReadBack = errors.New("the node's ResourceSlice has not been read back from the API server yet")

// Guard reads the node's ResourceSlice back after publishing and, when
// the API server dropped the consumable-capacity fields (a device it
// stores without them is handed out whole, to one claim at a time, while
// the agent gives each claim a slice), withdraws the node's devices,
// reports not ready, sets the metric and records a Warning Event on the
// Node. A withdrawal lasts until the agent restarts: publishing again to
// find out would offer unshareable devices meanwhile.
type Guard struct {
	Client   kubernetes.Interface
	Node     string
	Recorder record.EventRecorder
	// Metric receives whether the fields are intact (1) or dropped (0).
	Metric func(intact bool)
	// Withdraw publishes the node's pool without devices.
	Withdraw func()

	// Republish publishes the node's pool again (Untainted's fallback);
	// nil: nothing (tests).
	Republish func()

	mu      sync.Mutex
	state   error // nil: intact; errNotReadBack; ErrCapacityDropped (wrapped)
	dropped bool
	// untainted: the API server dropped the devices' taints (taints.go).
	untainted bool
}

// NewGuard starts in the state "not read back yet".
func NewGuard(client kubernetes.Interface, node string, recorder record.EventRecorder, metric func(bool), withdraw func()) *Guard {
	return &Guard{Client: client, Node: node, Recorder: recorder, Metric: metric, Withdraw: withdraw, state: errNotReadBack}
}

// Ready is nil while the published devices read back whole.
func (g *Guard) Ready() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

// Withdrawn reports whether the node's devices were withdrawn.
func (g *Guard) Withdrawn() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dropped
}

// Run verifies the published devices (want) every fast interval until
// they read back whole, then every slow one, until ctx ends or they are
// withdrawn.
func (g *Guard) Run(ctx context.Context, want func() []resourceapi.Device, fast, slow time.Duration) {
	for !g.Withdrawn() {
		if err := g.Verify(ctx, want()); err != nil {
			klog.FromContext(ctx).Error(err, "Reading the node's ResourceSlice back")
		}
		next := slow
		if g.Ready() != nil {
			next = fast
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// Verify reads the node's slices of this driver and compares them with
// the devices it publishes: a device not there yet leaves the state as it
// is; one stored without its consumable-capacity fields withdraws them all.
func (g *Guard) Verify(ctx context.Context, want []resourceapi.Device) error {
	sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: g.Node, resourceapi.ResourceSliceSelectorDriver: protocol.DRADriver}
	list, err := g.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return fmt.Errorf("listing the node's ResourceSlices: %w", err)
	}
	stored := map[string]resourceapi.Device{}
	for _, s := range list.Items {
		if s.Spec.Pool.Name != g.Node {
			continue
		}
		for _, d := range s.Spec.Devices {
			stored[d.Name] = d
		}
	}
	var missing, dropped, untainted []string
	for _, w := range want {
		got, ok := stored[w.Name]
		if !ok {
			missing = append(missing, w.Name)
			continue
		}
		if lost := droppedFields(w, got); len(lost) > 0 {
			dropped = append(dropped, w.Name+": "+strings.Join(lost, ", "))
		}
		if len(w.Taints) > 0 && len(got.Taints) == 0 {
			untainted = append(untainted, w.Name)
		}
	}
	if len(untainted) > 0 && len(dropped) == 0 {
		g.TaintsDropped(ctx, strings.Join(untainted, ", "))
	}
	switch {
	case len(dropped) > 0:
		g.Dropped(ctx, strings.Join(dropped, "; "))
	case len(missing) > 0:
		klog.FromContext(ctx).V(4).Info("Published devices not read back yet", "missing", missing)
	default:
		if g.setIntact() {
			klog.FromContext(ctx).Info("The node's ResourceSlice reads back with its consumable-capacity fields", "devices", len(want))
		}
	}
	return nil
}

// droppedFields names the consumable-capacity fields want has and got lost.
func droppedFields(want, got resourceapi.Device) []string {
	var lost []string
	if want.AllowMultipleAllocations != nil && got.AllowMultipleAllocations == nil {
		lost = append(lost, "allowMultipleAllocations")
	}
	for name, c := range want.Capacity {
		if c.RequestPolicy != nil && got.Capacity[name].RequestPolicy == nil {
			lost = append(lost, "capacity."+string(name)+".requestPolicy")
		}
	}
	return lost
}

// setIntact reports whether the state changed.
func (g *Guard) setIntact() bool {
	g.mu.Lock()
	first := g.state != nil
	g.state = nil
	g.mu.Unlock()
	if first {
		g.Metric(true)
	}
	return first
}

// Dropped withdraws the node's devices, once: not ready, the metric 0, a
// Warning Event on the Node naming the gate and the fix.
func (g *Guard) Dropped(ctx context.Context, detail string) {
	g.mu.Lock()
	if g.dropped {
		g.mu.Unlock()
		return
	}
	g.dropped = true
	g.state = fmt.Errorf("%w: %s", ErrCapacityDropped, detail)
	g.mu.Unlock()
	klog.FromContext(ctx).Error(ErrCapacityDropped, "Withdrawing the node's DRA devices", "dropped", detail)
	g.Metric(false)
	g.Withdraw()
	ref := &v1.ObjectReference{Kind: "Node", Name: g.Node, UID: types.UID(g.Node)}
	g.Recorder.Eventf(ref, v1.EventTypeWarning, ReasonCapacityDropped,
		"The API server dropped the consumable-capacity fields of this node's %s devices (%s): the %s feature gate is off. "+
			"The devices are withdrawn (no claim can get a slice of this node's cards). Enable %s on kube-apiserver and kube-scheduler, then restart the qgpu-agent of this node.",
		protocol.DRADriver, detail, FeatureGate, FeatureGate)
}

// isDroppedFields: the ResourceSlice controller saw the API server store a
// slice other than the one it wrote.
func isDroppedFields(err error) bool {
	var dropped *resourceslice.DroppedFieldsError
	return errors.As(err, &dropped)
}
