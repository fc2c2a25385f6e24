package dra

import (
	"sync"
	"time"

	"google.golang.org/grpc"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// The kubelet's DRA health service (KEP-4680, the kubelet's
// ResourceHealthStatus feature gate, alpha and off by default through
// 1.35): a kubelet with the gate streams each device's health from its
// plugin and shows it in the pods' containerStatuses[].allocatedResourcesStatus.
// The kubeletplugin helper registers the service because Driver
// implements it; a kubelet without the gate never calls it.

// Intervals of the health stream: every device's health is sent again
// this often (the kubelet counts a device it has not heard of within the
// timeout as Unknown).
const (
	healthResend  = 30 * time.Second
	healthTimeout = int64(3 * healthResend / time.Second)
)

// healthWaiters are the open NodeWatchResources streams' wake-up channels.
type healthWaiters struct {
	mu   sync.Mutex
	subs map[chan struct{}]bool
}

func (h *healthWaiters) subscribe() chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[chan struct{}]bool{}
	}
	ch := make(chan struct{}, 1)
	h.subs[ch] = true
	return ch
}

func (h *healthWaiters) unsubscribe(ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, ch)
}

func (h *healthWaiters) wake() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// HealthChanged sends every open health stream the cards' health now
// (the agent calls it at every change of its cards).
func (d *Driver) HealthChanged() { d.health.wake() }

// NodeWatchResources implements drahealth.DRAResourceHealthServer: the
// health of every card's device, at once, at every change and every
// healthResend, until the kubelet closes the stream.
func (d *Driver) NodeWatchResources(_ *drahealth.NodeWatchResourcesRequest, stream grpc.ServerStreamingServer[drahealth.NodeWatchResourcesResponse]) error {
	ch := d.health.subscribe()
	defer d.health.unsubscribe(ch)
	t := time.NewTicker(healthResend)
	defer t.Stop()
	for {
		if err := stream.Send(HealthResponse(d.node, d.cfg.Cards(), time.Now())); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-ch:
		case <-t.C:
		}
	}
}

// HealthResponse is the health of the node's cards' devices (those of at
// least 1 GiB, as Shared publishes them) at now.
func HealthResponse(node string, cards []protocol.Card, now time.Time) *drahealth.NodeWatchResourcesResponse {
	out := &drahealth.NodeWatchResourcesResponse{}
	for _, c := range cards {
		if c.MemoryGiB() < 1 {
			continue
		}
		h := drahealth.HealthStatus_HEALTHY
		if !c.Healthy {
			h = drahealth.HealthStatus_UNHEALTHY
		}
		out.Devices = append(out.Devices, &drahealth.DeviceHealth{
			Device:                    &drahealth.DeviceIdentifier{PoolName: node, DeviceName: protocol.DRADeviceName(c.Index)},
			Health:                    h,
			LastUpdatedTime:           now.Unix(),
			HealthCheckTimeoutSeconds: healthTimeout,
		})
	}
	return out
}
