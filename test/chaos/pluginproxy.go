package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// pluginProxy stands between one node's kubelet device manager and its
// agent's device plugins. The agent is given a plugin directory of the
// proxy's (--device-plugin-dir): it serves its plugins there and registers
// through the proxy's kubelet.sock. The proxy registers each plugin with
// the real kubelet under an endpoint of its own in the kubelet's directory
// and passes every call on to the agent's socket; an Allocate call its
// allocFaults pick is cut: the call to the agent is cancelled (its
// context ends, as when the kubelet's connection breaks) and the kubelet
// gets an error, so the pod fails admission.
//
// The kubelet's directory is /var/lib/kubelet/device-plugins in the hollow
// node's private mount namespace (test/hollownode puts a tmpfs on
// /var/lib); the proxy reaches it through /proc/<pid>/root of the process
// that registers, the agent, which shares that namespace.
//
// It does not follow a restart of the kubelet's device manager (the agent
// watches the proxy's kubelet.sock, which is not re-created): the runs
// that use it restart none.
type pluginProxy struct {
	pluginapi.UnimplementedRegistrationServer
	node   string
	dir    string // the agent's --device-plugin-dir
	faults *allocFaults
	count  *tally
	ln     *peerListener
	reg    *grpc.Server
	// cutAfter runs cut after d, and returns a func that stops it if it
	// has not run yet: time.AfterFunc, when nil (tests cut when the agent
	// has the call).
	cutAfter func(d time.Duration, cut func()) (stop func() bool)

	mu      sync.Mutex
	plugins map[string]*pluginForward // by the agent's endpoint
}

// allocateCut is the kubelet's error for a cut Allocate (one message, so
// that the run's failed admissions group under it).
const allocateCut = "chaos: the connection to the device plugin broke during Allocate"

func startPluginProxy(node, dir string, faults *allocFaults, count *tally) (*pluginProxy, error) {
	ln, err := listenUnix(filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		return nil, fmt.Errorf("plugin proxy of %s: %w", node, err)
	}
	p := &pluginProxy{node: node, dir: dir, faults: faults, count: count, ln: &peerListener{Listener: ln},
		reg: grpc.NewServer(), plugins: map[string]*pluginForward{}}
	pluginapi.RegisterRegistrationServer(p.reg, p)
	go func() { _ = p.reg.Serve(p.ln) }()
	return p, nil
}

func (p *pluginProxy) close() {
	p.reg.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.plugins {
		f.close()
	}
}

// Register implements pluginapi.RegistrationServer: the agent's plugin is
// registered with the kubelet under the proxy's endpoint for it.
func (p *pluginProxy) Register(ctx context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	pid := p.ln.pid.Load()
	if pid == 0 {
		return nil, status.Error(codes.Unavailable, "chaos plugin proxy: no peer process known")
	}
	kubeletDir := fmt.Sprintf("/proc/%d/root%s", pid, pluginapi.DevicePluginPath)
	f, err := p.forwarder(r.Endpoint, kubeletDir)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(kubeletDir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	defer conn.Close()
	own := &pluginapi.RegisterRequest{Version: r.Version, Endpoint: f.endpoint, ResourceName: r.ResourceName, Options: r.Options}
	if _, err := pluginapi.NewRegistrationClient(conn).Register(ctx, own); err != nil {
		return nil, err
	}
	p.count.add("registrations")
	return &pluginapi.Empty{}, nil
}

// forwarder returns the proxy's plugin for the agent's endpoint, serving
// in kubeletDir; a new one if its socket is gone.
func (p *pluginProxy) forwarder(endpoint, kubeletDir string) (*pluginForward, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	own := "chaos-" + endpoint
	if f := p.plugins[endpoint]; f != nil {
		if _, err := os.Stat(filepath.Join(kubeletDir, own)); err == nil {
			return f, nil
		}
		f.close()
	}
	ln, err := listenUnix(filepath.Join(kubeletDir, own))
	if err != nil {
		return nil, fmt.Errorf("plugin proxy of %s: %w", p.node, err)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		ln.Close()
		return nil, err
	}
	f := &pluginForward{p: p, endpoint: own, up: pluginapi.NewDevicePluginClient(conn), conn: conn, srv: grpc.NewServer()}
	pluginapi.RegisterDevicePluginServer(f.srv, f)
	go func() { _ = f.srv.Serve(ln) }()
	p.plugins[endpoint] = f
	return f, nil
}

// pluginForward is the proxy's side of one plugin.
type pluginForward struct {
	pluginapi.UnimplementedDevicePluginServer
	p        *pluginProxy
	endpoint string
	up       pluginapi.DevicePluginClient
	conn     *grpc.ClientConn
	srv      *grpc.Server
}

func (f *pluginForward) close() {
	f.srv.Stop()
	f.conn.Close()
}

func (f *pluginForward) GetDevicePluginOptions(ctx context.Context, e *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return f.up.GetDevicePluginOptions(ctx, e)
}

func (f *pluginForward) ListAndWatch(e *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	up, err := f.up.ListAndWatch(stream.Context(), e)
	if err != nil {
		return err
	}
	for {
		r, err := up.Recv()
		if err != nil {
			return err
		}
		if err := stream.Send(r); err != nil {
			return err
		}
	}
}

func (f *pluginForward) GetPreferredAllocation(ctx context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return f.up.GetPreferredAllocation(ctx, r)
}

func (f *pluginForward) PreStartContainer(ctx context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return f.up.PreStartContainer(ctx, r)
}

// Allocate passes the call on, or cuts it: the agent's call is cancelled
// after the chosen delay and the kubelet gets an error whatever the agent
// answered. It counts whether the cut came while the agent was still at
// work (its context ended mid-call) or after it answered (the answer lost).
func (f *pluginForward) Allocate(ctx context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	delay, cut := f.p.faults.decide()
	if !cut {
		f.p.count.add("Allocate passed")
		return f.up.Allocate(ctx, r)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	after := f.p.cutAfter
	if after == nil {
		after = func(d time.Duration, cut func()) func() bool { return time.AfterFunc(d, cut).Stop }
	}
	defer after(delay, cancel)()
	_, err := f.up.Allocate(cctx, r)
	switch {
	case status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled):
		f.p.count.add("Allocate cancelled mid-call")
	case err != nil:
		f.p.count.add("Allocate refused by the agent before the cut")
	default:
		f.p.count.add("Allocate answered, answer lost")
		// The cut comes after the answer: wait for it, as the kubelet
		// would wait for the answer that never arrives.
		<-cctx.Done()
	}
	return nil, status.Error(codes.Unavailable, allocateCut)
}

// peerListener notes the process id of the last peer that connected to a
// unix socket (SO_PEERCRED).
type peerListener struct {
	net.Listener
	pid atomic.Int32
}

func (l *peerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		if pid := peerPID(c); pid > 0 {
			l.pid.Store(pid)
		}
	}
	return c, err
}

func peerPID(c net.Conn) int32 {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	var pid int32
	_ = raw.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			pid = cred.Pid
		}
	})
	return pid
}
