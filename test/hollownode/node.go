package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"go.opentelemetry.io/otel/trace/noop"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
	kubeletoptions "k8s.io/kubernetes/cmd/kubelet/app/options"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	kubeletdra "k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubemark"
)

// run starts the kubelet and blocks until SIGTERM or SIGINT.
func run(o *options) error {
	if o.isolate {
		if err := setupMounts(o.rootDir); err != nil {
			return err
		}
	}
	if err := makeDirs(o.rootDir); err != nil {
		return err
	}
	// kubemark's config helper and parts of the kubelet make temporary
	// directories; keep them under the node's root dir, not the host's /tmp.
	if err := os.Setenv("TMPDIR", filepath.Join(o.rootDir, "tmp")); err != nil {
		return fmt.Errorf("setting TMPDIR: %w", err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)

	client, heartbeat, err := newClients(o.kubeconfig, o.statusPeriod)
	if err != nil {
		return err
	}
	agents := &agentRunner{o: o}
	var claims *kubeletdra.Manager
	if o.dra {
		if claims, err = newClaimManager(client, filepath.Join(o.rootDir, "kubelet")); err != nil {
			return err
		}
	}
	devices, err := newDeviceContainerManager(agents.start, claims, o.cdiDirs)
	if err != nil {
		return err
	}
	fakeRuntime, runtimeService, err := startFakeRuntime(o.rootDir)
	if err != nil {
		return err
	}
	defer fakeRuntime.Stop()
	flags, config, err := kubeletConfig(o)
	if err != nil {
		return err
	}
	hk := kubemark.NewHollowKubelet(flags, config, client, heartbeat,
		&machine{Fake: cadvisortest.Fake{NodeName: o.nodeName}, cores: o.cpu, memory: uint64(o.memory.Value())},
		fakeRuntime.ImageService,
		&recordingRuntime{RuntimeService: runtimeService, dir: filepath.Join(o.rootDir, "containers"), devices: devices},
		devices)
	// The kubelet ignores cancellation of this context; shutdown is by exit.
	ctx := klog.NewContext(context.Background(), klog.Background())
	server := &kubeletoptions.KubeletServer{KubeletFlags: *flags, KubeletConfiguration: *config}
	if err := kubeletapp.RunKubelet(ctx, server, hk.KubeletDeps); err != nil {
		agents.stop(time.Second)
		return fmt.Errorf("running hollow kubelet: %w", err)
	}
	waitForStop(sigs, devices, agents)
	agents.stop(3 * time.Second)
	devices.Stop()
	return nil
}

// waitForStop handles SIGHUP (device manager restart) and SIGUSR1 (agent
// killed and started again) until SIGTERM or SIGINT arrives.
func waitForStop(sigs <-chan os.Signal, devices *deviceContainerManager, agents *agentRunner) {
	for s := range sigs {
		if s == syscall.SIGUSR1 {
			klog.InfoS("SIGUSR1: restarting the agent")
			agents.restart()
			continue
		}
		if s != syscall.SIGHUP {
			klog.InfoS("Stopping", "signal", s)
			return
		}
		klog.InfoS("SIGHUP: restarting the device manager")
		if err := devices.RestartDeviceManager(); err != nil {
			klog.ErrorS(err, "Restarting device manager")
		}
	}
}

func makeDirs(root string) error {
	for _, d := range []string{"tmp", "kubelet", "containers", "static-pods", "pod-logs"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	return nil
}

func startFakeRuntime(root string) (*fakeremote.RemoteRuntime, internalapi.RuntimeService, error) {
	endpoint := "unix://" + filepath.Join(root, "cri.sock")
	fake := fakeremote.NewFakeRemoteRuntime()
	if err := fake.Start(endpoint); err != nil {
		return nil, nil, fmt.Errorf("starting fake CRI runtime: %w", err)
	}
	logger := klog.Background()
	svc, err := remote.NewRemoteRuntimeService(endpoint, 15*time.Second, noop.NewTracerProvider(), &logger)
	if err != nil {
		fake.Stop()
		return nil, nil, fmt.Errorf("connecting to fake CRI runtime: %w", err)
	}
	return fake, svc, nil
}

// newClients builds the kubelet's clients as kubemark does: a main one and
// a heartbeat one with a timeout no longer than the status period.
func newClients(kubeconfig string, statusPeriod time.Duration) (*clientset.Clientset, *clientset.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.UserAgent = "qgpu-hollow-node"
	cfg.QPS, cfg.Burst = 50, 100
	client, err := clientset.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("creating client: %w", err)
	}
	hb := *cfg
	hb.Timeout = max(statusPeriod, 10*time.Second)
	hb.QPS = -1
	heartbeat, err := clientset.NewForConfig(&hb)
	if err != nil {
		return nil, nil, fmt.Errorf("creating heartbeat client: %w", err)
	}
	return client, heartbeat, nil
}

// machine is cadvisor's fake with the node's configured CPU and memory.
type machine struct {
	cadvisortest.Fake
	cores  int
	memory uint64
}

func (m *machine) MachineInfo() (*cadvisorapi.MachineInfo, error) {
	info, err := m.Fake.MachineInfo()
	if err != nil {
		return nil, err
	}
	info.NumCores = m.cores
	info.MemoryCapacity = m.memory
	return info, nil
}
