package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// shortDir is a temporary directory with a path short enough for unix
// sockets (108 bytes), which t.TempDir's long names can exceed.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "chaos")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func serve(t *testing.T, socket string, register func(*grpc.Server)) {
	t.Helper()
	ln, err := listenUnix(socket)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
}

func dialUnix(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

type fakeKubelet struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
}

func (fakeKubelet) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{Namespace: "chaos", Name: "p-00001"}}}, nil
}

// The PodResources proxy answers with its refusal while its faults say
// so, and with the kubelet's answer otherwise.
func TestPodResourcesProxy(t *testing.T) {
	dir := shortDir(t)
	kubelet := filepath.Join(dir, "kubelet.sock")
	serve(t, kubelet, func(s *grpc.Server) { podresourcesapi.RegisterPodResourcesListerServer(s, fakeKubelet{}) })
	faults := newListFaults(1, 1, 1000)
	var count tally
	p, err := startPodResourcesProxy(filepath.Join(dir, "c", "pr.sock"), kubelet, faults, &count)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	client := podresourcesapi.NewPodResourcesListerClient(dialUnix(t, filepath.Join(dir, "c", "pr.sock")))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang, not a slow machine
	defer cancel()

	faults.begin(time.Now(), time.Minute)
	_, err = client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if c := status.Code(err); c != codes.ResourceExhausted && c != codes.Unavailable {
		t.Errorf("List with every call refused: %v, want ResourceExhausted or Unavailable", err)
	}
	faults.end()
	resp, err := client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil || len(resp.GetPodResources()) != 1 {
		t.Errorf("List with the faults off: %v, %v; want the kubelet's one pod", resp, err)
	}
	refused := 0
	for _, c := range refusals {
		refused += count.get("List refused by the proxy " + c.String())
	}
	if refused != 1 || count.get("List answered by the kubelet OK") != 1 {
		t.Errorf("counted %s; want one refusal and one answer of the kubelet", &count)
	}
}

type blockingAgent struct {
	pluginapi.UnimplementedDevicePluginServer
	called, cancelled chan struct{}
}

func (a *blockingAgent) Allocate(ctx context.Context, _ *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	close(a.called)
	select {
	case <-ctx.Done():
		close(a.cancelled)
		return nil, ctx.Err()
	case <-time.After(time.Minute): // a hang, not a slow machine
		return &pluginapi.AllocateResponse{}, nil
	}
}

// A cut Allocate reaches the agent as a cancelled call, mid-call, and the
// kubelet gets the proxy's error.
func TestPluginProxyCutsAllocate(t *testing.T) {
	dir := shortDir(t)
	agent := &blockingAgent{called: make(chan struct{}), cancelled: make(chan struct{})}
	serve(t, filepath.Join(dir, "dp", "qgpu-core.sock"), func(s *grpc.Server) { pluginapi.RegisterDevicePluginServer(s, agent) })
	faults := newAllocFaults(1, 1, 5*time.Millisecond, 10)
	faults.set(true)
	var count tally
	p, err := startPluginProxy("n1", filepath.Join(dir, "dp"), faults, &count)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	// The cut comes once the agent has the call, not after the faults'
	// few milliseconds: a loaded machine can take longer than that to
	// connect to the agent, and the call would be cut before it got there.
	p.cutAfter = func(_ time.Duration, cut func()) func() bool {
		go func() { <-agent.called; cut() }()
		return func() bool { return false }
	}
	kubeletDir := filepath.Join(dir, "kubelet")
	f, err := p.forwarder("qgpu-core.sock", kubeletDir)
	if err != nil {
		t.Fatal(err)
	}
	client := pluginapi.NewDevicePluginClient(dialUnix(t, filepath.Join(kubeletDir, f.endpoint)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang, not a slow machine
	defer cancel()
	_, err = client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"a"}}}})
	if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != allocateCut {
		t.Errorf("cut Allocate: %v, want Unavailable %q", err, allocateCut)
	}
	select {
	case <-agent.cancelled:
	case <-time.After(time.Minute): // a hang, not a slow machine
		t.Fatal("the agent's Allocate was not cancelled")
	}
	if n := count.get("Allocate cancelled mid-call"); n != 1 {
		t.Errorf("counted %d calls cancelled mid-call, want 1 (%s)", n, &count)
	}
}
