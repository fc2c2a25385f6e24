package dra

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestNodeWatchResources: the kubelet's health stream gets every card's
// device healthy at once, and the card's device unhealthy when the agent
// reports the change, then healthy again.
func TestNodeWatchResources(t *testing.T) {
	var mu sync.Mutex
	cards := append([]protocol.Card(nil), testCards...)
	d := &Driver{node: testNode, cfg: DriverConfig{Cards: func() []protocol.Card {
		mu.Lock()
		defer mu.Unlock()
		return append([]protocol.Card(nil), cards...)
	}}}
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer()
	drahealth.RegisterDRAResourceHealthServer(srv, d)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := drahealth.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealth.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	health := func() map[string]string {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, dh := range resp.Devices {
			if dh.Device.PoolName != testNode || dh.LastUpdatedTime == 0 || dh.HealthCheckTimeoutSeconds <= 0 {
				t.Errorf("device health %v: want pool %s, a time and a timeout", dh, testNode)
			}
			out[dh.Device.DeviceName] = dh.Health.String()
		}
		return out
	}
	if diff := cmp.Diff(map[string]string{"gpu-0": "HEALTHY", "gpu-1": "HEALTHY"}, health()); diff != "" {
		t.Errorf("at the start (-want +got):\n%s", diff)
	}
	for _, healthy := range []bool{false, true} {
		mu.Lock()
		cards[1].Healthy = healthy
		mu.Unlock()
		d.HealthChanged()
		want := map[string]string{"gpu-0": "HEALTHY", "gpu-1": map[bool]string{true: "HEALTHY", false: "UNHEALTHY"}[healthy]}
		if diff := cmp.Diff(want, health()); diff != "" {
			t.Errorf("card 1 healthy=%v (-want +got):\n%s", healthy, diff)
		}
	}
}
