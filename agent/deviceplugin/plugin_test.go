package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// fakeKubelet is the kubelet's Registration service on kubelet.sock.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	server *grpc.Server
	reqs   chan *pluginapi.RegisterRequest
}

func startKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	sock := filepath.Join(dir, KubeletSocketName)
	os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{server: grpc.NewServer(), reqs: make(chan *pluginapi.RegisterRequest, 16)}
	pluginapi.RegisterRegistrationServer(k.server, k)
	go k.server.Serve(lis)
	t.Cleanup(k.server.Stop)
	return k
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.reqs <- r
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) expectRegistrations(t *testing.T) {
	t.Helper()
	got := map[string]string{}
	for len(got) < 3 {
		select {
		case r := <-k.reqs:
			if r.Version != pluginapi.Version {
				t.Errorf("version %q", r.Version)
			}
			got[r.ResourceName] = r.Endpoint
		case <-time.After(time.Minute): // a hang, not a slow machine
			t.Fatalf("registrations: got %v, want all three resources", got)
		}
	}
	for r, name := range SocketNames {
		if got[r] != name {
			t.Errorf("%s registered endpoint %q, want %q", r, got[r], name)
		}
	}
}

type fakeAlloc struct{}

func (fakeAlloc) Allocate(_ context.Context, resource string, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	return &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"R": resource, "N": strings.Repeat("x", len(ids))}}, nil
}

func testCards() []protocol.Card {
	return []protocol.Card{
		{Index: 0, UUID: "GPU-a", Model: "T", MemoryMiB: 2048, Healthy: true},
		{Index: 1, UUID: "GPU-b", Model: "T", MemoryMiB: 2500, Healthy: true},
	}
}

func TestPluginsOverUnixSockets(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	kubelet := startKubelet(t, dir)
	m := NewManager(dir, testCards(), fakeAlloc{})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	kubelet.expectRegistrations(t)
	for _, name := range SocketNames {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("socket %s: mode %v, err %v; want 0600", name, fi.Mode().Perm(), err)
		}
	}

	conn, err := dial(filepath.Join(dir, SocketNames[protocol.ResourceMemory]))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pluginapi.NewDevicePluginClient(conn)
	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := healthCount(first.Devices); got[pluginapi.Healthy] != 4 || len(first.Devices) != 4 {
		t.Fatalf("first list: %v, want 4 healthy (2 GiB per card)", got)
	}
	cards := testCards()
	cards[1].Healthy = false
	m.UpdateCards(cards)
	second, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := healthCount(second.Devices); got[pluginapi.Unhealthy] != 2 || got[pluginapi.Healthy] != 2 {
		t.Fatalf("after the health change: %v, want 2 healthy and 2 unhealthy", got)
	}

	resp, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{first.Devices[0].ID, first.Devices[1].ID}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if e := resp.ContainerResponses[0].Envs; e["R"] != protocol.ResourceMemory || e["N"] != "xx" {
		t.Errorf("allocate envs %v", e)
	}
	_, err = client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"GPU-zzz-memory-0"}},
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), ErrUnknownDevice.Error()) {
		t.Errorf("unknown device: got %v", err)
	}
}

func TestReRegisterWhenKubeletRestarts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	kubelet := startKubelet(t, dir)
	m := NewManager(dir, testCards(), fakeAlloc{})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	kubelet.expectRegistrations(t)
	done := runWatching(t, ctx, m)

	// A kubelet restart: its socket goes away with the plugin sockets, then comes back.
	kubelet.server.Stop()
	for _, name := range append([]string{KubeletSocketName}, SocketNames[protocol.ResourceMemory]) {
		os.Remove(filepath.Join(dir, name))
	}
	restarted := startKubelet(t, dir)
	restarted.expectRegistrations(t)
	if _, err := os.Stat(filepath.Join(dir, SocketNames[protocol.ResourceMemory])); err != nil {
		t.Errorf("memory plugin socket not re-created: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// runWatching starts m.Run and returns once Run watches the plugin
// directory: a kubelet.sock re-created before would go unseen. The channel
// gets Run's result.
func runWatching(t *testing.T, ctx context.Context, m *Manager) <-chan error {
	t.Helper()
	watching := make(chan struct{})
	m.Watching = func() { close(watching) }
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, false) }()
	select {
	case <-watching:
	case err := <-done:
		t.Fatalf("Run returned before it watched %s: %v", m.Dir, err)
	}
	return done
}

func healthCount(devs []*pluginapi.Device) map[string]int {
	out := map[string]int{}
	for _, d := range devs {
		out[d.Health]++
	}
	return out
}

func TestDevices(t *testing.T) {
	cards := testCards()
	if got := len(Devices(protocol.ResourceMemory, cards)); got != 4 {
		t.Errorf("memory devices: %d, want 4", got)
	}
	if got := len(Devices(protocol.ResourceCore, cards)); got != 200 {
		t.Errorf("core devices: %d, want 200", got)
	}
	ids := map[string]bool{}
	for _, r := range []string{protocol.ResourceMemory, protocol.ResourceCore, protocol.ResourceCoreGreedy} {
		for _, d := range Devices(r, cards) {
			if ids[d.ID] {
				t.Fatalf("duplicate device ID %s", d.ID)
			}
			ids[d.ID] = true
		}
	}
}

// TestReadyFollowsRegistration: Ready fails before the first registration,
// while the kubelet is missing, and once a kubelet restart has removed the
// plugin sockets; it passes again after Run re-registered.
func TestReadyFollowsRegistration(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	m := NewManager(dir, testCards(), fakeAlloc{})
	defer m.Stop()
	if err := m.Ready(); err == nil {
		t.Error("Ready before any registration")
	}
	if d := m.FailingFor(); d != 0 {
		t.Errorf("FailingFor before any attempt = %v", d)
	}
	if err := m.Start(ctx); err == nil {
		t.Fatal("Start without a kubelet succeeded")
	}
	if err := m.Ready(); err == nil {
		t.Error("Ready although registration failed")
	}
	if d := m.FailingFor(); d <= 0 {
		t.Errorf("FailingFor after a failed attempt = %v, want > 0", d)
	}
	kubelet := startKubelet(t, dir)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	kubelet.expectRegistrations(t)
	if err := m.Ready(); err != nil {
		t.Errorf("Ready after registration: %v", err)
	}
	if d := m.FailingFor(); d != 0 {
		t.Errorf("FailingFor while registered = %v", d)
	}
	done := runWatching(t, ctx, m)

	// A kubelet restart removes the plugin sockets first.
	kubelet.server.Stop()
	for _, name := range []string{KubeletSocketName, SocketNames[protocol.ResourceCore]} {
		os.Remove(filepath.Join(dir, name))
	}
	if err := m.Ready(); err == nil {
		t.Error("Ready although the kubelet removed the sockets")
	}
	restarted := startKubelet(t, dir)
	restarted.expectRegistrations(t)
	// Ready follows the last Register call's answer, which the fake
	// kubelet has seen before the Manager has.
	deadline := time.Now().Add(time.Minute)
	for m.Ready() != nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := m.Ready(); err != nil {
		t.Errorf("Ready after re-registration: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
