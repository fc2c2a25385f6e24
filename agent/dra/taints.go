package dra

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TaintsGate is the Kubernetes feature gate that keeps device taints
// (alpha and off by default through 1.35).
const TaintsGate = "DRADeviceTaints"

// ReasonTaintsDropped is the Normal Event on the Node when the API server
// dropped the taint of an unhealthy card's device.
const ReasonTaintsDropped = "QGPUDRATaintsDropped"

// Tainted reports whether the node publishes its unhealthy cards tainted
// (UnhealthyTaint): until the read-back finds the API server dropped a
// taint. An API server without the gate stores the device untainted, so
// the guard then leaves unhealthy cards out of the slice, as before device
// taints: either way no new claim lands on one. Meanwhile (a read-back
// away) qgpu-scheduler refuses the card anyway: the node's inventory
// annotation says it is unhealthy.
func (g *Guard) Tainted() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.untainted
}

// TaintsDropped switches the node to leaving unhealthy cards out, once:
// it republishes, logs and records a Normal Event on the Node naming the
// gate. It lasts until the agent restarts (docs/dra.md#card-health).
func (g *Guard) TaintsDropped(ctx context.Context, devices string) {
	g.mu.Lock()
	if g.untainted {
		g.mu.Unlock()
		return
	}
	g.untainted = true
	g.mu.Unlock()
	klog.FromContext(ctx).Info("The API server dropped the device taints of unhealthy cards; leaving them out of the ResourceSlice instead",
		"devices", devices, "featureGate", TaintsGate)
	if g.Republish != nil {
		g.Republish()
	}
	ref := &v1.ObjectReference{Kind: "Node", Name: g.Node, UID: types.UID(g.Node)}
	g.Recorder.Eventf(ref, v1.EventTypeNormal, ReasonTaintsDropped,
		"The API server dropped the taint %s of this node's unhealthy %s devices (%s): the %s feature gate is off. "+
			"Unhealthy cards are left out of the ResourceSlice instead (they take no claim either way). "+
			"To see them tainted, enable %s on kube-apiserver, then restart the qgpu-agent of this node.",
		protocol.DRATaintUnhealthy, protocol.DRADriver, devices, TaintsGate, TaintsGate)
}
