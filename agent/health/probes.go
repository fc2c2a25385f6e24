package health

import (
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/qgpu-scheduler/qgpu/agent/deviceplugin"
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

// Probes are the agent's health checks (docs/agent-health.md).
//
// Readiness (/readyz): the device plugins are registered with the running
// kubelet, the store answers, and the Node carries the current inventory.
//
// Liveness (/livez, /healthz) asks only what a restart can fix: the store
// answers, and registration has not been failing for minutes. It never
// depends on the API server, so an apiserver outage does not make every
// kubelet restart its agent.
type Probes struct {
	store   *store.Store
	tracker *inventory.Tracker
	// plugins is nil until the agent has published its inventory and
	// started the plugins (PluginsStarted).
	plugins atomic.Pointer[deviceplugin.Manager]
	// published is the inventory annotation the agent last wrote.
	published atomic.Pointer[string]
	// draMode: the agent runs as a DRA kubelet plugin (agent/dra), whose
	// checks replace those of the device plugins and the inventory.
	draMode bool
	dra     atomic.Pointer[DRA]
}

// DRA is what readiness asks of the agent's DRA kubelet plugin.
type DRA interface {
	// Registered is nil once the kubelet registered the plugin.
	Registered() error
	// SliceIntact is nil while the node's ResourceSlice reads back with
	// its consumable-capacity fields.
	SliceIntact() error
}

// NewDRAProbes returns the checks of an agent in DRA mode with st; until
// DRAStarted, the plugin counts as waiting for the API server.
func NewDRAProbes(st *store.Store) *Probes {
	return &Probes{store: st, draMode: true}
}

// DRAStarted records the DRA kubelet plugin once the agent runs it.
func (p *Probes) DRAStarted(d DRA) { p.dra.Store(&d) }

// NewProbes returns the checks of an agent with st and tracker; until
// PluginsStarted, the plugins count as waiting for the API server.
func NewProbes(st *store.Store, tracker *inventory.Tracker) *Probes {
	return &Probes{store: st, tracker: tracker}
}

// PluginsStarted records the device plugins once the agent runs them.
func (p *Probes) PluginsStarted(m *deviceplugin.Manager) { p.plugins.Store(m) }

// Handlers are the HTTP handlers of /livez, /healthz and /readyz.
func (p *Probes) Handlers() map[string]http.Handler {
	st := WithTimeout(Check{Name: "store", Run: p.store.Check}, storeCheckTimeout)
	if p.draMode {
		// Liveness asks nothing of the kubelet or the API server: neither
		// is fixed by restarting the agent.
		live := Handler("livez", st)
		ready := Handler("readyz", st,
			Check{Name: "kubelet-plugin", Run: p.draCheck(DRA.Registered)},
			Check{Name: "resourceslice", Run: p.draCheck(DRA.SliceIntact)})
		return map[string]http.Handler{"/livez": live, "/healthz": live, "/readyz": ready}
	}
	live := Handler("livez", st, Check{Name: "device-plugins", Run: p.registrationNotStalled})
	ready := Handler("readyz", st,
		Check{Name: "device-plugins", Run: p.pluginsRegistered},
		Check{Name: "inventory", Run: p.inventoryPublished})
	return map[string]http.Handler{"/livez": live, "/healthz": live, "/readyz": ready}
}

// Published records inv as written to the Node (the inventory publisher's
// callback).
func (p *Probes) Published(inv *protocol.Inventory) {
	if v, err := inv.Encode(); err == nil {
		p.published.Store(&v)
	}
}

func (p *Probes) draCheck(check func(DRA) error) func() error {
	return func() error {
		d := p.dra.Load()
		if d == nil {
			return errors.New("DRA kubelet plugin not started (waiting for the Node)")
		}
		return check(*d)
	}
}

func (p *Probes) pluginsRegistered() error {
	m := p.plugins.Load()
	if m == nil {
		return errors.New("device plugins not started (waiting to publish the inventory)")
	}
	return m.Ready()
}

func (p *Probes) registrationNotStalled() error {
	m := p.plugins.Load()
	if m == nil {
		return nil // waiting for the API server: a restart would not help
	}
	if d := m.FailingFor(); d > registrationStallLimit {
		return fmt.Errorf("device plugins failing to register with the kubelet for %v", d.Round(time.Second))
	}
	return nil
}

func (p *Probes) inventoryPublished() error {
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
