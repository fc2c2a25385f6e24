package agent

import (
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/qgpu-scheduler/qgpu/agent/deviceplugin"
	"github.com/qgpu-scheduler/qgpu/agent/health"
	"github.com/qgpu-scheduler/qgpu/agent/inventory"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

const (
	// storeCheckTimeout bounds the store check: a store that does not
	// answer a read in this time is wedged.
	storeCheckTimeout = 5 * time.Second
	// registrationStallLimit is how long the device plugins may fail to
	// register with a running kubelet before liveness fails and the
	// kubelet restarts the agent.
	registrationStallLimit = 5 * time.Minute
)

// probes are the agent's health checks (docs/agent-health.md).
//
// Readiness (/readyz): the device plugins are registered with the running
// kubelet, the store answers, and the Node carries the current inventory.
//
// Liveness (/livez, /healthz) asks only what a restart can fix: the store
// answers, and registration has not been failing for minutes. It never
// depends on the API server, so an apiserver outage does not make every
// kubelet restart its agent.
type probes struct {
	store   *store.Store
	tracker *inventory.Tracker
	// plugins is nil until the agent has published its inventory and
	// started the plugins.
	plugins atomic.Pointer[deviceplugin.Manager]
	// published is the inventory annotation the agent last wrote.
	published atomic.Pointer[string]
}

func (p *probes) handlers() map[string]http.Handler {
	st := health.WithTimeout(health.Check{Name: "store", Run: p.store.Check}, storeCheckTimeout)
	live := health.Handler("livez", st, health.Check{Name: "device-plugins", Run: p.registrationNotStalled})
	ready := health.Handler("readyz", st,
		health.Check{Name: "device-plugins", Run: p.pluginsRegistered},
		health.Check{Name: "inventory", Run: p.inventoryPublished})
	return map[string]http.Handler{"/livez": live, "/healthz": live, "/readyz": ready}
}

// onPublished records inv as written to the Node.
func (p *probes) onPublished(inv *protocol.Inventory) {
	if v, err := inv.Encode(); err == nil {
		p.published.Store(&v)
	}
}

func (p *probes) pluginsRegistered() error {
	m := p.plugins.Load()
	if m == nil {
		return errors.New("device plugins not started (waiting to publish the inventory)")
	}
	return m.Ready()
}

func (p *probes) registrationNotStalled() error {
	m := p.plugins.Load()
	if m == nil {
		return nil // waiting for the API server: a restart would not help
	}
	if d := m.FailingFor(); d > registrationStallLimit {
		return fmt.Errorf("device plugins failing to register with the kubelet for %v", d.Round(time.Second))
	}
	return nil
}

func (p *probes) inventoryPublished() error {
	want, err := p.tracker.Inventory().Encode()
	if err != nil {
		return err
	}
	got := p.published.Load()
	switch {
	case got == nil:
		return errors.New("inventory not published on the Node yet")
	case *got != want:
		return errors.New("the Node's inventory is older than the cards' state (publishing)")
	}
	return nil
}
