package harness

import (
	"context"
	"errors"
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
// the calls its hooks refuse: a kubelet that rate-limits, restarts or
// answers late, where the agent's --pod-resources-socket points at the
// proxy. Only unix sockets on this machine are involved.
type PodResourcesProxy struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	Socket string // where the proxy listens

	upstream *grpc.ClientConn
	client   podresourcesapi.PodResourcesListerClient
	hooks    PodResourcesHooks
	server   *grpc.Server

	mu             sync.Mutex
	calls, refused int
}

// PodResourcesHooks say what the proxy does with each call; either may be nil.
type PodResourcesHooks struct {
	// Refuse is asked before each call, numbered from 1 across methods
	// (calls are serialised through it): an error it returns is the answer.
	Refuse func(method string, call int) error
	// Answered is told the kubelet's own answer to each call passed on (a
	// ResourceExhausted is the kubelet's rate limit).
	Answered func(method string, err error)
}

// StartPodResourcesProxy listens on socket (a socket file left there is
// replaced) and forwards to the kubelet's upstream socket (which may not
// exist yet: such calls fail as the kubelet's would, Unavailable).
func StartPodResourcesProxy(socket, upstream string, hooks PodResourcesHooks) (*PodResourcesProxy, error) {
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return nil, err
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
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
		hooks: hooks, server: grpc.NewServer()}
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
	if p.hooks.Refuse == nil {
		return nil
	}
	err := p.hooks.Refuse(method, p.calls)
	if err != nil {
		p.refused++
	}
	return err
}

func (p *PodResourcesProxy) answered(method string, err error) {
	if p.hooks.Answered != nil {
		p.hooks.Answered(method, err)
	}
}

// List implements PodResourcesListerServer.
func (p *PodResourcesProxy) List(ctx context.Context, req *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	if err := p.admit("List"); err != nil {
		return nil, err
	}
	resp, err := p.client.List(ctx, req)
	p.answered("List", err)
	return resp, err
}

// Get implements PodResourcesListerServer.
func (p *PodResourcesProxy) Get(ctx context.Context, req *podresourcesapi.GetPodResourcesRequest) (*podresourcesapi.GetPodResourcesResponse, error) {
	if err := p.admit("Get"); err != nil {
		return nil, err
	}
	resp, err := p.client.Get(ctx, req)
	p.answered("Get", err)
	return resp, err
}

// GetAllocatableResources implements PodResourcesListerServer.
func (p *PodResourcesProxy) GetAllocatableResources(ctx context.Context, req *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	if err := p.admit("GetAllocatableResources"); err != nil {
		return nil, err
	}
	resp, err := p.client.GetAllocatableResources(ctx, req)
	p.answered("GetAllocatableResources", err)
	return resp, err
}
