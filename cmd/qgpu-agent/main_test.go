package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/internal/version"
)

// --version prints the stamped version and starts nothing (no node name,
// no kubeconfig, no NVML needed).
func TestRunVersion(t *testing.T) {
	old := version.Version
	version.Version = "v1.2.3-4-gabcdef0"
	t.Cleanup(func() { version.Version = old })
	t.Setenv("NODE_NAME", "")
	var out bytes.Buffer
	if err := run([]string{"--version"}, &out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "qgpu-agent v1.2.3-4-gabcdef0\n"; got != want {
		t.Errorf("--version printed %q, want %q", got, want)
	}
}

func TestParseFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	t.Setenv("KUBECONFIG", "")
	f, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.NodeName != "from-env" || f.DBFile != "/var/lib/qgpu/meta.db" || f.DevicePluginDir != "/var/lib/kubelet/device-plugins" ||
		f.PodResourcesSocket != "/var/lib/kubelet/pod-resources/kubelet.sock" || f.Backend != "env" || f.MetricsAddr != ":9400" ||
		f.ReconcileInterval != 30*time.Second || !f.PriorityController || f.PriorityPoll != 10*time.Millisecond ||
		f.PriorityIdle != 100*time.Millisecond || f.CgroupRoot != "/sys/fs/cgroup" || f.DeviceRoot != "/dev" || f.MPSControlBin != "nvidia-cuda-mps-control" {
		t.Errorf("defaults: %+v", f)
	}
	f, err = parseFlags([]string{"--node-name=n2", "--fake-cards=2xA100-80G,1xT4", "--backend=mps", "--metrics-addr=127.0.0.1:0", "-v=4"})
	if err != nil || f.NodeName != "n2" || f.fakeCards != "2xA100-80G,1xT4" || f.Backend != "mps" || f.MPSControlBin != "" {
		t.Errorf("flags: %+v %v", f, err)
	}
	if f, err := parseFlags(nil); err != nil || f.ProcRoot != "/proc" || f.FakeActivityFile != "" || f.metricsAddrFile != "" {
		t.Errorf("defaults of the simulation flags: %+v %v", f, err)
	}
	f, err = parseFlags([]string{"--node-name=n3", "--fake-activity-file=/tmp/a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.nvmlFor(); err == nil {
		t.Error("--fake-activity-file accepted without --fake-cards")
	}
	if _, err := parseFlags([]string{"extra"}); err == nil {
		t.Error("stray argument accepted")
	}
}

func TestNVMLChoice(t *testing.T) {
	f := &flags{fakeCards: "4xT5"}
	if _, err := f.nvmlFor(); !errors.Is(err, nvml.ErrFakeSpec) {
		t.Errorf("bad spec: %v", err)
	}
	f = &flags{fakeHealthFile: "/tmp/x"}
	if _, err := f.nvmlFor(); err == nil || !strings.Contains(err.Error(), "needs --fake-cards") {
		t.Errorf("health file without fake cards: %v", err)
	}
	// Without --fake-cards the real library is used; where no driver is
	// installed, the agent must say so clearly.
	lib, err := (&flags{}).nvmlFor()
	if err != nil {
		t.Fatal(err)
	}
	d, err := nvml.Open(lib)
	if err == nil {
		d.Close()
		t.Skip("an NVIDIA driver is installed here")
	}
	if !errors.Is(err, nvml.ErrNoNVML) || !strings.Contains(err.Error(), "--fake-cards") {
		t.Errorf("no driver: %v", err)
	}
}
