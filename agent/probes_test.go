package agent

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/qgpu-scheduler/qgpu/agent/nvml"
)

// freeAddr returns a loopback address nothing listens on (the probes must
// answer before Started reports the address).
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

func probe(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

// TestProbes: while the Node does not exist (the agent cannot publish, so
// its plugins are not started), /livez passes and /readyz fails naming the
// plugins and the inventory; once the Node exists, both pass; a health
// change that cannot be published makes the agent unready again.
func TestProbes(t *testing.T) {
	dir := t.TempDir()
	reg := fakeKubelet(t, dir)

	client := fake.NewClientset()
	cards, _ := nvml.ParseFakeSpec("2xT4")
	fakeNVML := nvml.NewFake(cards, "n1", "")
	addr := freeAddr(t)
	cfg := Config{
		NodeName: "n1", Client: client, NVML: fakeNVML, DBFile: filepath.Join(dir, "db", "meta.db"),
		DevicePluginDir: dir, Backend: "env", MetricsAddr: addr,
		HealthInterval: 20 * time.Millisecond, ReconcileInterval: time.Hour,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	poll(t, "the probes to answer", func() bool { code, _ := probe(t, "http://"+addr+"/livez"); return code != 0 })
	for _, path := range []string{"/livez", "/healthz"} {
		if code, body := probe(t, "http://"+addr+path); code != http.StatusOK {
			t.Errorf("%s without a Node: %d %s, want 200 (liveness must not depend on the API server)", path, code, body)
		}
	}
	code, body := probe(t, "http://"+addr+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "[-]device-plugins") ||
		!strings.Contains(body, "[-]inventory") || !strings.Contains(body, "[+]store ok") {
		t.Errorf("/readyz without a Node: %d\n%s", code, body)
	}

	if _, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "/readyz to pass", func() bool { code, _ := probe(t, "http://"+addr+"/readyz"); return code == http.StatusOK })
	if n := len(reg.reqs); n != 3 {
		t.Errorf("ready with %d registrations, want 3", n)
	}

	// The Node goes away: the next health change cannot be published.
	if err := client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fakeNVML.SetHealthy(1, false)
	poll(t, "/readyz to fail on the unpublished inventory", func() bool {
		code, body := probe(t, "http://"+addr+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "[-]inventory")
	})
	if code, body := probe(t, "http://"+addr+"/livez"); code != http.StatusOK {
		t.Errorf("/livez with an unpublished inventory: %d %s", code, body)
	}
}
