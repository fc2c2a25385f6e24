package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/agent/deviceplugin"
	qnvml "github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestRunMIGAndUnhealthyCards: a card in MIG mode is not in the Node's
// inventory and a Warning Event on the Node says why; a grant on a card
// that has turned unhealthy is refused with FailedPrecondition naming the
// card and the reason.
func TestRunMIGAndUnhealthyCards(t *testing.T) {
	dir := t.TempDir()
	reg := fakeKubelet(t, dir)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	client := fake.NewClientset(node, testPod()) // testPod is assigned card 1
	cards, _ := qnvml.ParseFakeSpec("2xT4")
	fakeNVML := qnvml.NewFake(cards, "n1", "")
	fakeNVML.SetMIG(0, nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE)
	cfg := Config{
		NodeName: "n1", Client: client, NVML: fakeNVML, DBFile: filepath.Join(dir, "db", "meta.db"),
		DevicePluginDir: dir, Backend: "env", HealthInterval: 50 * time.Millisecond, ReconcileInterval: time.Hour,
	}
	run := startAgent(t, cfg)
	ctx := run.ctx
	for range 3 {
		<-reg.reqs
	}
	if inv := nodeInventory(t, client); len(inv.Cards) != 1 || inv.Cards[0].UUID != fakeNVML.UUID(1) {
		t.Errorf("inventory %+v: want only card 1 (card 0 is in MIG mode)", inv.Cards)
	}
	poll(t, "the QGPUCardNotShared Event on the Node", func() bool {
		events, _ := client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		for _, e := range events.Items {
			if e.Reason == ReasonCardNotShared && e.InvolvedObject.Kind == "Node" && strings.Contains(e.Message, "MIG mode is enabled") {
				return true
			}
		}
		return false
	})

	fakeNVML.SetHealthy(1, false)
	poll(t, "card 1 unhealthy in the inventory", func() bool { return !nodeInventory(t, client).Cards[0].Healthy })
	err := allocateErr(dir, protocol.ResourceMemory, fmt.Sprintf("%s-memory-0", fakeNVML.UUID(1)), fmt.Sprintf("%s-memory-1", fakeNVML.UUID(1)))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "card 1 ("+fakeNVML.UUID(1)+")") ||
		!strings.Contains(err.Error(), "health query failed") {
		t.Errorf("Allocate on the unhealthy card: %v, want FailedPrecondition naming card 1 and why", err)
	}
	run.stop(t)
}

func allocateErr(dir, resource string, ids ...string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, deviceplugin.SocketNames[resource]), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewDevicePluginClient(conn).Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	return err
}
