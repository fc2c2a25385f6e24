package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/qgpu-scheduler/qgpu/agent/dra"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestDRA runs the agent in DRA mode against a real kube-apiserver (1.35
// in process; make integration-skew's binaries), with the test as the
// kubelet's plugin watcher (it registers the plugin through its
// registration socket, as the kubelet does). With the
// DRAConsumableCapacity gate off (the default through 1.35; beta and on by
// default from 1.36, so the case turns it off by flag) the API server drops the
// devices' allowMultipleAllocations and requestPolicy: the agent reads its
// slice back, withdraws its devices, reports not ready, sets
// qgpu_dra_consumable_capacity to 0 and records QGPUDRACapacityDropped on
// its Node. With the gate on the slice reads back whole and it is ready.
func TestDRA(t *testing.T) {
	bin, err := harness.BinaryPath("", "QGPU_AGENT_BIN", "qgpu-agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("gate off", func(t *testing.T) {
		cp := harness.StartWith(t, harness.ControlPlaneOptions{ExtraFlags: []string{"--feature-gates=DRAConsumableCapacity=false"}})
		addr := startDRAAgent(t, cp, bin, "dra-off")
		waitProbe(t, addr, "/readyz", http.StatusServiceUnavailable, "[-]resourceslice failed", "DRAConsumableCapacity", "[+]kubelet-plugin ok")
		waitMetric(t, addr, "qgpu_dra_consumable_capacity 0")
		waitNodeEvent(t, cp.Client, "dra-off", dra.ReasonCapacityDropped, "DRAConsumableCapacity")
		waitSlice(t, cp.Client, "dra-off", func(devices []resourceapi.Device) error {
			if len(devices) != 0 {
				return fmt.Errorf("%d devices still published", len(devices))
			}
			return nil
		})
	})
	t.Run("gate on", func(t *testing.T) {
		cp := harness.StartWith(t, harness.ControlPlaneOptions{ExtraFlags: []string{"--feature-gates=DRAConsumableCapacity=true"}})
		addr := startDRAAgent(t, cp, bin, "dra-on")
		waitProbe(t, addr, "/readyz", http.StatusOK, "[+]resourceslice ok", "[+]kubelet-plugin ok")
		waitMetric(t, addr, "qgpu_dra_consumable_capacity 1")
		waitSlice(t, cp.Client, "dra-on", func(devices []resourceapi.Device) error {
			if len(devices) != 2 {
				return fmt.Errorf("%d devices, want 2", len(devices))
			}
			for _, d := range devices {
				mem := d.Capacity[protocol.DRACapacityMemory]
				cores := d.Capacity[protocol.DRACapacityCores]
				if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations || mem.RequestPolicy == nil || cores.RequestPolicy == nil ||
					mem.RequestPolicy.ValidRange == nil || mem.RequestPolicy.ValidRange.Max.Value() != *d.Attributes[protocol.DRAAttributeMemoryGiB].IntValue<<30 ||
					d.Attributes[protocol.DRAAttributeUUID].StringValue == nil {
					return fmt.Errorf("device %s not whole: %+v", d.Name, d)
				}
			}
			return nil
		})
		if evs := nodeEvents(t, cp.Client, "dra-on", dra.ReasonCapacityDropped); len(evs) != 0 {
			t.Errorf("events %v with the gate on", evs)
		}
	})
}

// startDRAAgent creates the Node, runs the agent in DRA mode with two fake
// T4s, registers its kubelet plugin, and returns its probe address.
func startDRAAgent(t *testing.T, cp *harness.ControlPlane, bin, node string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cp.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Labels: map[string]string{protocol.LabelDeviceEnable: protocol.LabelValueEnable}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp("", "qgpu-dra-") // short: the sockets' paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	kubeconfig := filepath.Join(root, "admin.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackAddr(t)
	registry := filepath.Join(root, "registry")
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--node-name="+node, "--kubelet-api=dra", "--fake-cards=2xT4",
		"--dbfile="+filepath.Join(root, "meta.db"), "--kubelet-plugins-dir="+filepath.Join(root, "plugins"),
		"--kubelet-registry-dir="+registry, "--cdi-spec-dir="+filepath.Join(root, "cdi"), "--cdi-node-spec-dirs="+filepath.Join(root, "cdi"),
		"--cdi-card-kind=", "--pod-resources-socket=", "--priority-controller=false", "--metrics-addr="+addr, "-v=4")
	logPath := filepath.Join(root, "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("agent log:\n%s", tail(string(b), 60))
			}
		}
	})
	registerPlugin(t, filepath.Join(registry, protocol.DRADriver+"-reg.sock"))
	return addr
}

// registerPlugin does what the kubelet's plugin watcher does with a new
// socket in its registry: GetInfo, then NotifyRegistrationStatus.
func registerPlugin(t *testing.T, socket string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), agentWait)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		_, err := os.Stat(socket)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("registration socket %s: %v", socket, err)
	}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", strings.TrimPrefix(addr, "unix://"))
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)
	info, err := client.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != protocol.DRADriver {
		t.Fatalf("GetInfo = %+v, want a DRA plugin named %s", info, protocol.DRADriver)
	}
	if _, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
}

func waitProbe(t *testing.T, addr, path string, code int, contains ...string) {
	t.Helper()
	var got int
	var body string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, agentWait, true, func(context.Context) (bool, error) {
		got, body = getProbe(addr, path)
		if got != code {
			return false, nil
		}
		for _, c := range contains {
			if !strings.Contains(body, c) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s: %d\n%s\nwant %d with %q", path, got, body, code, contains)
	}
}

func waitMetric(t *testing.T, addr, line string) {
	t.Helper()
	var body string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, agentWait, true, func(context.Context) (bool, error) {
		_, body = getProbe(addr, "/metrics")
		return strings.Contains(body, "\n"+line+"\n"), nil
	})
	if err != nil {
		t.Fatalf("/metrics lacks %q:\n%s", line, grepLines(body, "qgpu_dra"))
	}
}

func waitNodeEvent(t *testing.T, cs kubernetes.Interface, node, reason, contains string) {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, agentWait, true, func(context.Context) (bool, error) {
		got = nodeEvents(t, cs, node, reason)
		for _, m := range got {
			if strings.Contains(m, contains) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event on Node %s mentioning %q (have %v)", reason, node, contains, got)
	}
}

// nodeEvents lists the type and message of the events of reason on Node node.
func nodeEvents(t *testing.T, cs kubernetes.Interface, node, reason string) []string {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node, "reason": reason}.String()
	list, err := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Type+" "+e.Message)
	}
	return out
}

// waitSlice waits until check accepts the devices of the node's pool.
func waitSlice(t *testing.T, cs kubernetes.Interface, node string, check func([]resourceapi.Device) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, agentWait, true, func(ctx context.Context) (bool, error) {
		sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: node, resourceapi.ResourceSliceSelectorDriver: protocol.DRADriver}.String()
		list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, err
		}
		if len(list.Items) == 0 {
			last = fmt.Errorf("no ResourceSlice of node %s", node)
			return false, nil
		}
		var devices []resourceapi.Device
		for _, s := range list.Items {
			devices = append(devices, s.Spec.Devices...)
		}
		last = check(devices)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("node %s's ResourceSlice: %v (%v)", node, last, err)
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
