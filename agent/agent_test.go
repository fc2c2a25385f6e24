package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/agent/deviceplugin"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

type registrar struct {
	pluginapi.UnimplementedRegistrationServer
	reqs chan string
}

func (r *registrar) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r.reqs <- req.ResourceName
	return &pluginapi.Empty{}, nil
}

// runningAgent is an agent startAgent runs for a test.
type runningAgent struct {
	ctx     context.Context // the agent's, until stop
	metrics net.Addr        // its metrics server
	cancel  context.CancelFunc
	done    chan error
}

// startAgent runs the agent with cfg (its Started hook is set here) and
// returns once the agent reports itself started; the test fails if Run
// returns first.
func startAgent(t *testing.T, cfg Config) *runningAgent {
	t.Helper()
	started := make(chan net.Addr, 1)
	cfg.Started = func(a net.Addr) { started <- a }
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &runningAgent{ctx: ctx, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- Run(ctx, cfg) }()
	select {
	case r.metrics = <-started:
	case err := <-r.done:
		t.Fatalf("Run: %v", err)
	}
	return r
}

// stop stops the agent and fails the test if Run returned an error.
func (r *runningAgent) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// poll waits until f holds, for up to a minute: only a failing test waits
// it out.
func poll(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fakeKubelet serves the kubelet's registration socket in dir until the
// test ends and returns what the plugins register.
func fakeKubelet(t *testing.T, dir string) *registrar {
	t.Helper()
	lis, err := net.Listen("unix", filepath.Join(dir, deviceplugin.KubeletSocketName))
	if err != nil {
		t.Fatal(err)
	}
	reg := &registrar{reqs: make(chan string, 16)}
	kubelet := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(kubelet, reg)
	go kubelet.Serve(lis)
	t.Cleanup(kubelet.Stop)
	return reg
}

// TestRun runs the whole agent on a fake clientset, a simulated NVML and a
// fake kubelet registration socket: inventory, registration, an Allocate over
// the plugin socket, the grant annotation, a health change, metrics, shutdown.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	reg := fakeKubelet(t, dir)

	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{protocol.LabelSchedulePolicy: "fs"}}}
	pod := testPod()
	client := fake.NewClientset(node, pod)
	cards, _ := nvml.ParseFakeSpec("2xT4")
	fakeNVML := nvml.NewFake(cards, "n1", "")
	cfg := Config{
		NodeName: "n1", Client: client, NVML: fakeNVML, DBFile: filepath.Join(dir, "db", "meta.db"),
		DevicePluginDir: dir, Backend: "env", MetricsAddr: "127.0.0.1:0",
		HealthInterval: 50 * time.Millisecond, ReconcileInterval: time.Hour,
	}
	run := startAgent(t, cfg)
	ctx, metricsAddr := run.ctx, run.metrics
	inv := nodeInventory(t, client)
	if len(inv.Cards) != 2 || !inv.Cards[1].Healthy {
		t.Fatalf("inventory %+v", inv)
	}
	for range 3 {
		<-reg.reqs
	}

	// The kubelet allocates the pod's memory and cores.
	resp := callAllocate(t, dir, protocol.ResourceMemory, fmt.Sprintf("%s-memory-0", fakeNVML.UUID(1)), fmt.Sprintf("%s-memory-1", fakeNVML.UUID(1)))
	if e := resp.ContainerResponses[0].Envs; e["NVIDIA_VISIBLE_DEVICES"] != fakeNVML.UUID(1) || e["QGPU_POLICY"] != "fixed-share" {
		t.Errorf("memory envs %v", e)
	}
	var coreIDs []string
	for i := range 25 {
		coreIDs = append(coreIDs, fmt.Sprintf("%s-core-%d", fakeNVML.UUID(0), i))
	}
	callAllocate(t, dir, protocol.ResourceCore, coreIDs...)
	poll(t, "the grant annotation", func() bool {
		p, _ := client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
		return p.Annotations[protocol.AnnotationGrant] != ""
	})

	fakeNVML.SetHealthy(0, false)
	poll(t, "card 0 unhealthy in the inventory", func() bool { return !nodeInventory(t, client).Cards[0].Healthy })

	body := get(t, "http://"+metricsAddr.String()+"/metrics")
	if !strings.Contains(body, `qgpu_card_memory_granted_bytes{card="1",uuid="`+fakeNVML.UUID(1)+`"} 2.147483648e+09`) {
		t.Errorf("metrics lack the grant:\n%s", body)
	}
	run.stop(t)
	for _, name := range deviceplugin.SocketNames {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("socket %s left behind: %v", name, err)
		}
	}
}

func testPod() *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-p", Annotations: map[string]string{}},
		Spec: v1.PodSpec{NodeName: "n1", Containers: []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{
			protocol.ResourceMemory: resource.MustParse("2"), protocol.ResourceCore: resource.MustParse("25"),
		}}}}},
	}
	a := protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: "uid-p", Node: "n1", Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "main", Slices: []protocol.Slice{{Index: 1, UUID: "GPU-set-below", MemoryGiB: 2, Cores: 25}}}}}
	cards, _ := nvml.ParseFakeSpec("2xT4")
	a.Containers[0].Slices[0].UUID = nvml.NewFake(cards, "n1", "").UUID(1)
	v, _ := a.Encode()
	p.Annotations[protocol.AnnotationAssignment] = v
	return p
}

func nodeInventory(t *testing.T, client *fake.Clientset) *protocol.Inventory {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := protocol.DecodeInventory([]byte(n.Annotations[protocol.AnnotationInventory]))
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func callAllocate(t *testing.T, dir, resource string, ids ...string) *pluginapi.AllocateResponse {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, deviceplugin.SocketNames[resource]), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := pluginapi.NewDevicePluginClient(conn).Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatalf("Allocate %s: %v", resource, err)
	}
	return resp
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
