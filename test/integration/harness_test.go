// Package integration holds every test that needs a real kube-apiserver:
// linking one costs minutes of build on two cores, so they share one test
// binary. Programs under test (hollow node, agent, scheduler) are built into
// bin/ by `make build` beforehand, never by the tests.
package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

const widget corev1.ResourceName = "example.com/widget"

// TestHollowNodeDevicePlugin checks the harness end to end: a device plugin
// registers with the hollow node's real device manager, its devices become
// node capacity, and kubelet admission calls its Allocate, also after the
// device manager restarts.
func TestHollowNodeDevicePlugin(t *testing.T) {
	plugin, err := harness.BinaryPath("", "QGPU_FAKE_PLUGIN_BIN", "qgpu-fake-plugin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := harness.BinaryPath("", "QGPU_HOLLOW_NODE_BIN", "qgpu-hollow-node"); err != nil {
		t.Fatal(err)
	}
	cp := harness.StartWith(t, harness.ControlPlaneOptions{RBAC: true})
	start := time.Now()
	node := harness.StartNode(t, cp, harness.HollowNodeOptions{Name: "hollow-1", AgentCmd: plugin})
	// A second node at the same time: each has its own /var/lib, so both
	// device managers serve kubelet.sock and both plugins register.
	other := harness.StartNode(t, cp, harness.HollowNodeOptions{Name: "hollow-2", AgentCmd: plugin})

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, n := range []*harness.HollowNode{node, other} {
		if err := n.WaitForCapacity(ctx, cp.Client, widget, 4); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("two nodes with widget capacity in %v", time.Since(start).Round(time.Millisecond))

	var first sets.Set[string]
	t.Run("allocate", func(t *testing.T) {
		first = runWidgetPod(ctx, t, cp.Client, node, "first", 2)
	})
	t.Run("after device manager restart", func(t *testing.T) {
		if err := node.RestartDeviceManager(); err != nil {
			t.Fatal(err)
		}
		// The plugin logs once per registration: a second line means it saw
		// the new kubelet.sock and registered with the new device manager.
		if err := waitForLogCount(ctx, node.AgentLogPath(), "registered example.com/widget", 2); err != nil {
			t.Fatal(err)
		}
		if err := node.WaitForCapacity(ctx, cp.Client, widget, 4); err != nil {
			t.Fatal(err)
		}
		second := runWidgetPod(ctx, t, cp.Client, node, "second", 2)
		if both := first.Intersection(second); both.Len() > 0 {
			t.Errorf("devices %v allocated to both pods (first %v, second %v)", sets.List(both), sets.List(first), sets.List(second))
		}
	})
}

// runWidgetPod creates a pod bound to node that requests n widgets, waits
// until it runs, and returns the device IDs the plugin handed it.
func runWidgetPod(ctx context.Context, t *testing.T, client kubernetes.Interface, node *harness.HollowNode, name string, n int64) sets.Set[string] {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			NodeName: node.Name,
			Containers: []corev1.Container{{
				Name:  "main",
				Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{widget: *resource.NewQuantity(n, resource.DecimalSI)},
				},
			}},
		},
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	if err := waitForPodRunning(ctx, client, "default", name); err != nil {
		t.Fatal(err)
	}
	env, err := node.ContainerEnv("default", name, "main")
	if err != nil {
		t.Fatal(err)
	}
	ids := sets.New(strings.Split(env["WIDGET_IDS"], ",")...)
	if int64(ids.Len()) != n || ids.Has("") {
		t.Fatalf("pod %s: WIDGET_IDS=%q, want %d distinct ids (env %v)", name, env["WIDGET_IDS"], n, env)
	}
	return ids
}

func waitForPodRunning(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	var last string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("phase %s, reason %q, message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod failed: %s", last)
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for pod %s/%s to run (last: %s): %w", ns, name, last, err)
	}
	return nil
}

// waitForLogCount waits until path holds at least n lines containing substr.
func waitForLogCount(ctx context.Context, path, substr string, n int) error {
	var got int
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return false, nil
		}
		got = strings.Count(string(b), substr)
		return got >= n, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d lines with %q in %s (have %d): %w", n, substr, path, got, err)
	}
	return nil
}

// TestBinaryAPIServer checks what make integration-skew relies on: with
// $QGPU_KUBE_APISERVER_BIN the control plane is that binary, reporting the
// release in $QGPU_KUBE_APISERVER_VERSION (so the suite cannot pass on the
// in-process server by mistake), and a restart keeps its URL, serving
// certificate and ServiceAccount signing key.
func TestBinaryAPIServer(t *testing.T) {
	if os.Getenv(harness.APIServerBinEnv) == "" {
		t.Skipf("$%s is not set: the suite runs the in-process apiserver (make integration-skew sets it)", harness.APIServerBinEnv)
	}
	cp := harness.StartWith(t, harness.ControlPlaneOptions{RBAC: true, Restartable: true})
	info, err := cp.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if want := os.Getenv("QGPU_KUBE_APISERVER_VERSION"); info.GitVersion != want {
		t.Errorf("the apiserver reports %s, want $QGPU_KUBE_APISERVER_VERSION=%q", info.GitVersion, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tok, err := cp.ServiceAccountToken(ctx, "default", "probe", nil)
	if err != nil {
		t.Fatal(err)
	}
	url := cp.URL
	if err := cp.RestartAPIServer(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if cp.URL != url {
		t.Errorf("URL after restart %s, want %s", cp.URL, url)
	}
	cs, err := kubernetes.NewForConfig(cp.ConfigForToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	// The token of the first start authenticates after the restart: a
	// 403 (RBAC grants the account nothing) is authenticated, a 401 is not.
	_, err = cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err == nil || !apierrors.IsForbidden(err) {
		t.Errorf("listing pods with the token after the restart: %v, want forbidden (authenticated, no RBAC grant)", err)
	}
	if _, err := cp.Client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("admin client after the restart: %v", err)
	}
}
