package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// serviceIP is the kubernetes Service's ClusterIP: the first address of the
// test apiserver's service range (10.0.0.0/16).
const serviceIP = "10.0.0.1"

// stepLog prints a timestamped progress line.
func stepLog(start time.Time, format string, args ...any) {
	fmt.Printf("[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, o options) (result, error) {
	start := time.Now()
	var res result
	if err := os.RemoveAll(o.workDir); err != nil {
		return res, err
	}
	if err := os.MkdirAll(o.workDir, 0o755); err != nil {
		return res, err
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	cp, err := harness.StartControlPlane(startCtx, harness.ControlPlaneOptions{RBAC: true, ServiceAccounts: true,
		// Cards shared between claims (docs/dra.md#feature-gates): the DRA leg.
		// Privileged pods: the escape checks' device control
		// (escapeControls), in the opted-out namespace only; the tenant's
		// namespace enforces Pod Security baseline.
		ExtraFlags: []string{"--feature-gates=DRAConsumableCapacity=true", "--allow-privileged=true"}})
	cancel()
	if err != nil {
		return res, err
	}
	defer cp.Stop()
	stepLog(start, "kube-apiserver and etcd up at %s", cp.URL)
	admin := filepath.Join(o.workDir, "admin.kubeconfig")
	if err := cp.WriteKubeconfig(admin); err != nil {
		return res, err
	}
	caFile := filepath.Join(o.workDir, "apiserver-ca.crt")
	if err := os.WriteFile(caFile, cp.Config.CAData, 0o644); err != nil {
		return res, err
	}
	stopControllers, err := startControllers(o, admin, caFile)
	defer stopControllers()
	if err != nil {
		return res, err
	}
	stepLog(start, "kube-controller-manager and the default scheduler started")
	u, err := url.Parse(cp.URL)
	if err != nil {
		return res, err
	}
	proxy, err := startServiceProxy(filepath.Join(o.workDir, "proxy.sock"), serviceIP+":443", u.Host)
	if err != nil {
		return res, err
	}
	defer proxy.close()
	nodes, err := startNodes(ctx, o, cp)
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	if err != nil {
		return res, err
	}
	if err := waitNodesReady(ctx, cp.Client, nodes); err != nil {
		reportRestarts(start, nodes, time.Time{})
		diagnose(nodes)
		return res, err
	}
	readyAt := time.Now()
	stepLog(start, "%d nodes Ready", len(nodes))
	res, err = check(ctx, start, o, cp, nodes)
	res.failures += reportRestarts(start, nodes, readyAt)
	diagnose(nodes)
	return res, err
}

// startControllers runs kube-controller-manager (Deployments, DaemonSets,
// the kube-root-ca.crt ConfigMaps ServiceAccount tokens need) and a default
// scheduler for the pods whose schedulerName is default-scheduler (the agent
// DaemonSet's and the qgpu-scheduler Deployment's own pods): the
// qgpu-scheduler binary with no --config, which is kube-scheduler with its
// default profile.
func startControllers(o options, admin, caFile string) (func(), error) {
	var procs []*proc
	stop := func() {
		for _, p := range procs {
			p.terminate(15 * time.Second)
		}
	}
	for _, c := range []struct {
		name string
		bin  string
		args []string
	}{
		{"kube-controller-manager", filepath.Join(o.binDir, "kube-controller-manager"), []string{
			"--kubeconfig", admin, "--root-ca-file", caFile, "--leader-elect=false", "--secure-port=0",
			"--use-service-account-credentials=false", "--controllers=*,-serviceaccount-token", "--v=1"}},
		// DRAConsumableCapacity: without it the default scheduler's
		// DynamicResources refuses a qGPU claim itself ("has capacity
		// requests"); with it, it allocates one and the DRA leg sees
		// manifests/dra's qgpu-dra-allocator policy refuse the write.
		{"default-scheduler", filepath.Join(o.repoBin, "qgpu-scheduler"), []string{
			"--kubeconfig", admin, "--leader-elect=false", "--secure-port=0", "--v=1",
			"--feature-gates=DRAConsumableCapacity=true"}},
	} {
		log, err := os.Create(filepath.Join(o.workDir, c.name+".log"))
		if err != nil {
			return stop, err
		}
		cmd := exec.Command(c.bin, c.args...)
		cmd.Stdout, cmd.Stderr = log, log
		p, err := startProc(cmd, syscall.SIGKILL)
		log.Close()
		if err != nil {
			return stop, fmt.Errorf("starting %s: %w", c.name, err)
		}
		procs = append(procs, p)
	}
	return stop, nil
}

// startNodes starts a plain qGPU node, a mixed one (online and offline
// pods go only to mixed nodes) and the DRA leg's mixed node (draNode), each
// with its own kubelet client certificate (system:node:<name>, so the Node
// authorizer applies). They come up in parallel: start only launches the
// node's runner.
func startNodes(ctx context.Context, o options, cp *harness.ControlPlane) ([]*node, error) {
	images, err := filepath.Glob(filepath.Join(o.imageDir, "*.tar"))
	if err != nil || len(images) == 0 {
		return nil, fmt.Errorf("no image tarballs in %s (run make images): %v", o.imageDir, err)
	}
	env := nodeEnv{binDir: o.binDir, images: images, pauseImage: o.repo + "/pause:" + o.version,
		proxySocket: filepath.Join(o.workDir, "proxy.sock"), serviceIP: serviceIP}
	specs := []*node{
		{name: "e2e-node-1", labels: []string{"qgpu-device-enable=enable"}, prefix: "169.254.11",
			mode: runtimeMode{acceptEnvvar: true}},
		{name: "e2e-node-2", labels: []string{"qgpu-device-enable=enable", "mixed-qgpu-enable=enable"}, prefix: "169.254.12",
			mode: runtimeMode{nvidiaDefault: true, acceptEnvvar: o.defaultRuntimeAcceptsEnvvar}, devicePluginSpec: true},
		draNode(),
	}
	var started []*node
	for _, n := range specs {
		n.dir = filepath.Join(o.workDir, n.name)
		if n.ports, err = freePorts(); err != nil {
			return started, fmt.Errorf("node %s: %w", n.name, err)
		}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return started, err
		}
		kubeconfig := filepath.Join(n.dir, "kubelet.kubeconfig")
		if err := cp.KubeconfigForUser(kubeconfig, "system:node:"+n.name, "system:nodes"); err != nil {
			return started, err
		}
		cards := cardCount(o.fakeCards)
		if n.dra {
			cards = cardCount(draFakeCards)
		}
		if err := n.start(env, kubeconfig, cards); err != nil {
			return started, fmt.Errorf("node %s: %w", n.name, err)
		}
		started = append(started, n)
	}
	return started, nil
}

// freePorts returns two TCP ports of 127.0.0.1 that no one listens on now,
// for a kubelet and its healthz server: fixed ports would collide with
// whatever else the machine runs.
func freePorts() ([2]int, error) {
	var ports [2]int
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return ports, fmt.Errorf("finding a free port: %w", err)
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

func waitNodesReady(ctx context.Context, client kubernetes.Interface, nodes []*node) error {
	for _, n := range nodes {
		err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			if n.exited() {
				return false, fmt.Errorf("node %s runner exited (see %s)", n.name, n.dir)
			}
			obj, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range obj.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("node %s not Ready: %w (logs in %s)", n.name, err, n.dir)
		}
	}
	return nil
}
