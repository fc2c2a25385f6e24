package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// ErrUnknownDevice is wrapped when the kubelet asks for a device the plugin never listed.
var ErrUnknownDevice = errors.New("unknown device")

// Allocator answers one container's request for device IDs of a resource.
type Allocator interface {
	Allocate(ctx context.Context, resource string, ids []string) (*pluginapi.ContainerAllocateResponse, error)
}

// Plugin is the device-plugin server of one resource.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	Resource string
	Socket   string // absolute path of the plugin's socket
	alloc    Allocator

	mu      sync.Mutex
	devices []*pluginapi.Device
	known   map[string]bool
	changed chan struct{} // closed and replaced on every SetDevices
	server  *grpc.Server
}

var _ pluginapi.DevicePluginServer = &Plugin{}

// NewPlugin returns the plugin of resource, serving on socket.
func NewPlugin(resource, socket string, alloc Allocator) *Plugin {
	return &Plugin{Resource: resource, Socket: socket, alloc: alloc, changed: make(chan struct{})}
}

// SetDevices replaces the device list; open ListAndWatch streams send it.
func (p *Plugin) SetDevices(devs []*pluginapi.Device) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.devices = devs
	p.known = make(map[string]bool, len(devs))
	for _, d := range devs {
		p.known[d.ID] = true
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Plugin) snapshot() ([]*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.devices, p.changed
}

// Serve listens on the socket (owner-only), serves, and returns once a call
// over the socket has been answered.
func (p *Plugin) Serve(ctx context.Context) error {
	if err := os.Remove(p.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale socket: %w", err)
	}
	lis, err := net.Listen("unix", p.Socket)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", p.Socket, err)
	}
	if err := os.Chmod(p.Socket, 0o600); err != nil {
		lis.Close()
		return fmt.Errorf("restricting %s: %w", p.Socket, err)
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	p.mu.Lock()
	p.server = server
	p.mu.Unlock()
	go func() {
		if err := server.Serve(lis); err != nil {
			klog.FromContext(ctx).Error(err, "Device plugin server stopped", "resource", p.Resource)
		}
	}()
	return confirm(ctx, p.Socket)
}

// confirm calls GetDevicePluginOptions over the socket, as the kubelet will.
func confirm(ctx context.Context, socket string) error {
	conn, err := dial(socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := pluginapi.NewDevicePluginClient(conn)
	var callErr error
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		_, callErr = client.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
		return callErr == nil, nil
	})
	if err != nil {
		if callErr != nil {
			err = callErr
		}
		return fmt.Errorf("plugin socket %s does not answer: %w", socket, err)
	}
	return nil
}

func dial(socket string) (*grpc.ClientConn, error) {
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", socket, err)
	}
	return conn, nil
}

// Register announces the plugin to the kubelet's Registration service.
func (p *Plugin) Register(ctx context.Context, kubeletSocket string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := dial(kubeletSocket)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(p.Socket),
		ResourceName: p.Resource,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		return fmt.Errorf("registering %s with the kubelet: %w", p.Resource, err)
	}
	return nil
}

// Stop stops the server (ending open streams) and removes the socket.
func (p *Plugin) Stop() {
	p.mu.Lock()
	server := p.server
	p.server = nil
	p.mu.Unlock()
	if server != nil {
		server.Stop()
	}
	if err := os.Remove(p.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.Background().Error(err, "Removing plugin socket", "socket", p.Socket)
	}
}
