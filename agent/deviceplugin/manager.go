package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// KubeletSocketName is the kubelet's registration socket in the plugin directory.
const KubeletSocketName = "kubelet.sock"

// Manager runs the three plugins and re-registers them when the kubelet restarts.
type Manager struct {
	Dir     string
	Plugins []*Plugin
	// Registered, if set, is called after every successful registration round
	// (tests wait on it).
	Registered func()
	// Watching, if set, is called once Run watches Dir for kubelet.sock
	// (tests wait on it before they restart the kubelet).
	Watching func()

	mu sync.Mutex // serialises restarts

	state        sync.Mutex
	registered   bool      // every plugin registered with the current kubelet
	failingSince time.Time // first failed or unfinished registration round; zero when registered
}

// NewManager returns the plugins of all qGPU resources in dir, with cards' devices.
func NewManager(dir string, cards []protocol.Card, alloc Allocator) *Manager {
	m := &Manager{Dir: dir}
	for _, r := range protocol.Resources {
		p := NewPlugin(r, filepath.Join(dir, SocketNames[r]), alloc)
		p.SetDevices(Devices(r, cards))
		m.Plugins = append(m.Plugins, p)
	}
	return m
}

// UpdateCards refreshes every plugin's devices (health changes).
func (m *Manager) UpdateCards(cards []protocol.Card) {
	for _, p := range m.Plugins {
		p.SetDevices(devicesFor(p.Resource, cards))
	}
}

// Start serves every plugin and registers it with the kubelet.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setRegistered(false)
	for _, p := range m.Plugins {
		p.Stop()
		if err := p.Serve(ctx); err != nil {
			return fmt.Errorf("serving %s: %w", p.Resource, err)
		}
	}
	for _, p := range m.Plugins {
		if err := p.Register(ctx, filepath.Join(m.Dir, KubeletSocketName)); err != nil {
			return err
		}
	}
	m.setRegistered(true)
	klog.FromContext(ctx).Info("Device plugins registered", "dir", m.Dir)
	if m.Registered != nil {
		m.Registered()
	}
	return nil
}

func (m *Manager) setRegistered(ok bool) {
	m.state.Lock()
	defer m.state.Unlock()
	m.registered = ok
	switch {
	case ok:
		m.failingSince = time.Time{}
	case m.failingSince.IsZero():
		m.failingSince = time.Now()
	}
}

// Ready returns nil when every plugin is registered with the kubelet that
// runs now: the last registration round succeeded, and neither kubelet.sock
// nor a plugin socket has gone since (a restarting kubelet deletes the
// plugin sockets before it re-creates its own).
func (m *Manager) Ready() error {
	m.state.Lock()
	registered := m.registered
	m.state.Unlock()
	if !registered {
		return errors.New("device plugins not registered with the kubelet")
	}
	socks := []string{filepath.Join(m.Dir, KubeletSocketName)}
	for _, p := range m.Plugins {
		socks = append(socks, p.Socket)
	}
	for _, s := range socks {
		if _, err := os.Stat(s); err != nil {
			return fmt.Errorf("socket gone since registration (kubelet restarting?): %w", err)
		}
	}
	return nil
}

// FailingFor returns how long registration has been failing or unfinished,
// 0 while the plugins are registered or before the first attempt.
func (m *Manager) FailingFor() time.Duration {
	m.state.Lock()
	defer m.state.Unlock()
	if m.failingSince.IsZero() {
		return 0
	}
	return time.Since(m.failingSince)
}

// Stop stops every plugin and removes its socket.
func (m *Manager) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.Plugins {
		p.Stop()
	}
}

// Run restarts and re-registers the plugins whenever kubelet.sock is
// re-created (a kubelet restart removes the plugin sockets and forgets the
// registrations), until ctx ends. With start, it also starts them once the
// watch is in place, so no re-creation can be missed. A failed start is
// retried with a jittered backoff from 1 s to 30 s (the kubelet may not be
// up yet), reset by a success.
func (m *Manager) Run(ctx context.Context, start bool) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", m.Dir, err)
	}
	defer w.Close()
	if err := w.Add(m.Dir); err != nil {
		return fmt.Errorf("watching %s: %w", m.Dir, err)
	}
	if m.Watching != nil {
		m.Watching()
	}
	logger := klog.FromContext(ctx)
	backoff := restartBackoff()
	var retry <-chan time.Time
	if start {
		retry = m.restart(ctx, &backoff)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.Errors:
			logger.Error(err, "Watching the device-plugin directory")
		case e := <-w.Events:
			if filepath.Base(e.Name) != KubeletSocketName || !e.Has(fsnotify.Create) {
				continue
			}
			logger.Info("kubelet.sock re-created: restarting the device plugins")
			backoff = restartBackoff()
			retry = m.restart(ctx, &backoff)
		case <-retry:
			retry = m.restart(ctx, &backoff)
		}
	}
}

// restartBackoff is the delay between failed starts: 1 s doubling to 30 s,
// each with up to 10 % jitter so that the agents of a node pool restarted
// with their kubelets do not retry in step.
func restartBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: 30 * time.Second}
}

// restart returns a timer channel to retry on, or nil after a success
// (which resets the backoff).
func (m *Manager) restart(ctx context.Context, backoff *wait.Backoff) <-chan time.Time {
	if err := m.Start(ctx); err != nil {
		delay := backoff.Step()
		if !errors.Is(err, context.Canceled) {
			klog.FromContext(ctx).Error(err, "Restarting the device plugins", "retryIn", delay)
		}
		return time.After(delay)
	}
	*backoff = restartBackoff()
	return nil
}
