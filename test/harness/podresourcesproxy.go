package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodResourcesProxy serves the kubelet's PodResources API v1 on a unix
// socket of its own and passes each call to the kubelet's socket, except
// the calls its fault refuses: a kubelet that rate-limits, restarts or
// answers late, where the agent's --pod-resources-socket points at the
// proxy. Only unix sockets on this machine are involved.
type PodResourcesProxy struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	Socket string // where the proxy listens

	upstream *grpc.ClientConn
	client   podresourcesapi.PodResourcesListerClient
	fault    func(method string, call int) error
	server   *grpc.Server

	mu             sync.Mutex
	calls, refused int
}

// StartPodResourcesProxy listens on socket and forwards to the kubelet's
// upstream socket (which may not exist yet: such calls fail as the
// kubelet's would, Unavailable). fault is asked before each call, numbered
// from 1 across methods; an error it returns is the answer.
func StartPodResourcesProxy(socket, upstream string, fault func(method string, call int) error) (*PodResourcesProxy, error) {
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(upstream)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("PodResources proxy upstream %s: %w", upstream, err)
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("PodResources proxy: %w", err)
	}
	p := &PodResourcesProxy{Socket: socket, upstream: conn, client: podresourcesapi.NewPodResourcesListerClient(conn),
		fault: fault, server: grpc.NewServer()}
	podresourcesapi.RegisterPodResourcesListerServer(p.server, p)
	go func() { _ = p.server.Serve(l) }()
	return p, nil
}

// Close stops serving and drops the upstream connection.
func (p *PodResourcesProxy) Close() {
	p.server.Stop()
	p.upstream.Close()
}

// Counts returns the calls the proxy answered and how many of them it refused.
func (p *PodResourcesProxy) Counts() (calls, refused int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls, p.refused
}

func (p *PodResourcesProxy) admit(method string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.fault == nil {
		return nil
	}
	err := p.fault(method, p.calls)
	if err != nil {
		p.refused++
	}
	return err
}

// List implements PodResourcesListerServer.
func (p *PodResourcesProxy) List(ctx context.Context, req *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	if err := p.admit("List"); err != nil {
		return nil, err
	}
	return p.client.List(ctx, req)
}

// Get implements PodResourcesListerServer.
func (p *PodResourcesProxy) Get(ctx context.Context, req *podresourcesapi.GetPodResourcesRequest) (*podresourcesapi.GetPodResourcesResponse, error) {
	if err := p.admit("Get"); err != nil {
		return nil, err
	}
	return p.client.Get(ctx, req)
}

// GetAllocatableResources implements PodResourcesListerServer.
func (p *PodResourcesProxy) GetAllocatableResources(ctx context.Context, req *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	if err := p.admit("GetAllocatableResources"); err != nil {
		return nil, err
	}
	return p.client.GetAllocatableResources(ctx, req)
}
