package integration

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestAgentProbes runs the real agent on a hollow node whose kubelet may
// not register its Node (its user has no rights): the agent serves its
// probes while it waits for the Node; /livez passes (it does not depend
// on the API server) and /readyz fails naming the device plugins and the
// inventory. Once an admin creates the Node, the agent publishes, its
// plugins register with the kubelet's device manager and /readyz passes;
// after a kubelet restart it passes again, once the plugins re-registered.
func TestAgentProbes(t *testing.T) {
	cp := harness.StartWith(t, harness.ControlPlaneOptions{RBAC: true})
	agent, err := harness.BinaryPath("", "QGPU_AGENT_BIN", "qgpu-agent")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	nodeKubeconfig := filepath.Join(root, "node.kubeconfig")
	agentKubeconfig := filepath.Join(root, "agent.kubeconfig")
	if err := cp.KubeconfigForUser(nodeKubeconfig, "nobody"); err != nil {
		t.Fatal(err)
	}
	if err := cp.WriteKubeconfig(agentKubeconfig); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackAddr(t)
	labels := map[string]string{protocol.LabelDeviceEnable: protocol.LabelValueEnable}
	node := harness.StartNode(t, cp, harness.HollowNodeOptions{
		Name: "probed", RootDir: root, Kubeconfig: nodeKubeconfig, Labels: labels, AgentCmd: agent,
		AgentArgs: []string{
			"--kubeconfig=" + agentKubeconfig,
			"--fake-cards=2xT4",
			"--dbfile=" + filepath.Join(root, "qgpu", "meta.db"),
			"--pod-resources-socket=" + filepath.Join(root, "kubelet", "pod-resources", "kubelet.sock"),
			"--metrics-addr=" + addr,
			"-v=2",
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), agentWait)
	defer cancel()
	if err := waitForLogCount(ctx, node.AgentLogPath(), "Waiting for the Node to be registered", 1); err != nil {
		t.Fatal(err)
	}
	if code, body := getProbe(addr, "/livez"); code != http.StatusOK {
		t.Errorf("/livez while the Node is missing: %d\n%s", code, body)
	}
	code, body := getProbe(addr, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "[-]device-plugins") || !strings.Contains(body, "[-]inventory") {
		t.Errorf("/readyz before registration: %d\n%s\nwant 503 naming the device plugins and the inventory", code, body)
	}

	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "probed", Labels: labels}}
	if _, err := cp.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, addr)
	if err := waitForLogCount(ctx, node.AgentLogPath(), "Device plugins registered", 1); err != nil {
		t.Fatal(err)
	}

	if err := node.RestartDeviceManager(); err != nil {
		t.Fatal(err)
	}
	waitRegistrations(t, node, 2)
	waitReady(t, addr)
}

func waitReady(t *testing.T, addr string) {
	t.Helper()
	var code int
	var body string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, agentWait, true, func(context.Context) (bool, error) {
		code, body = getProbe(addr, "/readyz")
		return code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("/readyz: %d\n%s", code, body)
	}
}

// getProbe GETs http://addr/path?verbose; code 0 if nothing answers.
func getProbe(addr, path string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path + "?verbose")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// freeLoopbackAddr returns a loopback address nothing listens on now: the
// probes answer before the agent could report a port it picked itself.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}
