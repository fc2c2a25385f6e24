package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
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

	mu sync.Mutex // serialises restarts
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
		p.SetDevices(Devices(p.Resource, cards))
	}
}

// Start serves every plugin and registers it with the kubelet.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
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
	klog.FromContext(ctx).Info("Device plugins registered", "dir", m.Dir)
	if m.Registered != nil {
		m.Registered()
	}
	return nil
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
// retried every 2 s (the kubelet may not be up yet).
func (m *Manager) Run(ctx context.Context, start bool) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", m.Dir, err)
	}
	defer w.Close()
	if err := w.Add(m.Dir); err != nil {
		return fmt.Errorf("watching %s: %w", m.Dir, err)
	}
	logger := klog.FromContext(ctx)
	var retry <-chan time.Time
	if start {
		retry = m.restart(ctx)
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
			retry = m.restart(ctx)
		case <-retry:
			retry = m.restart(ctx)
		}
	}
}

// restart returns a timer channel to retry on, or nil after a success.
func (m *Manager) restart(ctx context.Context) <-chan time.Time {
	if err := m.Start(ctx); err != nil {
		if !errors.Is(err, context.Canceled) {
			klog.FromContext(ctx).Error(err, "Restarting the device plugins; retrying in 2s")
		}
		return time.After(2 * time.Second)
	}
	return nil
}
