package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/internal/version"
)

// mainEnv makes the test binary run the agent's Main (TestJSONLogs).
const mainEnv = "QGPU_AGENT_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		Main()
	}
	os.Exit(m.Run())
}

// parseFlags parses args as the command does, without running anything.
func parseFlags(args []string) (*options, error) {
	o := newOptions()
	cmd := newCommand(o, &bytes.Buffer{})
	if err := cmd.ParseFlags(args); err != nil {
		return nil, err
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return nil, err
	}
	if err := o.complete(cmd.Flags()); err != nil {
		return nil, err
	}
	return o, nil
}

// A bad card spec flag stops the agent before it starts, naming the flag
// and the value; --cdi-card-kind="" turns the card spec and its checks off.
func TestCardSpecFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cdi-card-kind=qgpu.io"}, `--cdi-card-kind "qgpu.io"`},
		{[]string{"--cdi-card-kind=qgpu.io/container"}, `--cdi-card-kind "qgpu.io/container"`},
		{[]string{"--driver-root=run/nvidia/driver"}, `--driver-root "run/nvidia/driver"`},
		{[]string{"--dev-root-ctr-path=dev"}, `--dev-root-ctr-path "dev"`},
		{[]string{"--cdi-hook-path=nvidia-cdi-hook"}, `--cdi-hook-path "nvidia-cdi-hook"`},
		{[]string{"--cdi-card-kind=", "--driver-root=relative"}, ""},
		{[]string{"--driver-root=/run/nvidia/driver"}, ""},
	} {
		o, err := parseFlags(tc.args)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		case tc.want == "" && tc.args[0] == "--driver-root=/run/nvidia/driver" && o.CardSpec.DevRoot != "/run/nvidia/driver":
			t.Errorf("--dev-root defaults to --driver-root: %q", o.CardSpec.DevRoot)
		}
	}
}

// --version prints the stamped version and starts nothing (no node name,
// no kubeconfig, no NVML needed).
func TestRunVersion(t *testing.T) {
	old := version.Version
	version.Version = "v1.2.3-4-gabcdef0"
	t.Cleanup(func() { version.Version = old })
	t.Setenv("NODE_NAME", "")
	var out bytes.Buffer
	cmd := newCommand(newOptions(), &out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
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
		f.ReconcileInterval != 30*time.Second || f.HealthInterval != 5*time.Second || !f.PriorityController || f.PriorityPoll != 10*time.Millisecond ||
		f.PriorityIdle != 100*time.Millisecond || f.CgroupRoot != "/sys/fs/cgroup" || f.DeviceRoot != "/dev" || f.DeviceListStrategy != "cdi-cri" ||
		f.CDISpecDir != "/var/run/cdi" || fmt.Sprint(f.CDINodeSpecDirs) != "[/etc/cdi /var/run/cdi]" ||
		f.HAMiLibDir != "/usr/local/vgpu" || f.MPSRoot != "/run/qgpu/mps" || f.logs.Format != "text" ||
		f.HAMiLibName != "" || f.HAMiLockDir != "/tmp/vgpulock" || f.HAMiRegionRoot != "" {
		t.Errorf("defaults: %+v", f)
	}
	f, err = parseFlags([]string{"--node-name=n2", "--fake-cards=2xA100-80G,1xT4", "--backend=mps", "--metrics-addr=127.0.0.1:0", "-v=4"})
	if err != nil || f.NodeName != "n2" || f.fakeCards != "2xA100-80G,1xT4" || f.Backend != "mps" || f.DeviceListStrategy != "envvar" || f.logs.Verbosity != 4 {
		t.Errorf("flags: %+v %v", f, err)
	}
	f, err = parseFlags([]string{"--fake-cards=1xT4", "--device-list-strategy=cdi-annotations"})
	if err != nil || f.DeviceListStrategy != "cdi-annotations" {
		t.Errorf("an explicit --device-list-strategy with fake cards: %+v %v", f, err)
	}
	if f, err := parseFlags(nil); err != nil || f.ProcRoot != "/proc" || f.metricsAddrFile != "" {
		t.Errorf("defaults of the simulation flags: %+v %v", f, err)
	}
	// The simulated activity is a test build's (test/agentsim), not the shipped binary's.
	if _, err := parseFlags([]string{"--fake-activity-file=/tmp/a"}); err == nil {
		t.Error("--fake-activity-file accepted by the production command")
	}
	if _, err := parseFlags([]string{"extra"}); err == nil || !strings.Contains(err.Error(), "unexpected arguments") {
		t.Errorf("stray argument: %v", err)
	}
	if _, err := parseFlags([]string{"--no-such-flag"}); err == nil {
		t.Error("unknown flag accepted")
	}
	if f, err := parseFlags([]string{"--logging-format=json", "--v=3", "--vmodule=agent*=5"}); err != nil || f.logs.Format != "json" || f.logs.Verbosity != 3 {
		t.Errorf("logging flags: %+v %v", f, err)
	}
}

// TestManifestArgsParse: every argument the shipped manifests and the test
// harnesses give the agent parses, so moving the command line cannot break
// a deployment or a suite.
func TestManifestArgsParse(t *testing.T) {
	cases := map[string][]string{
		// test/harness (cluster.go, colocation.go), test/integration
		// (agent_helpers_test.go, agent_health_test.go), test/chaos (env.go)
		// and test/e2enode (check.go's kustomize patch).
		// (Mixed nodes run test/agentsim, whose test parses their arguments.)
		"harness": {"--fake-cards=2xT4", "--dbfile=/tmp/r/meta.db", "--metrics-addr=127.0.0.1:0", "--kubeconfig=/tmp/r/kubeconfig",
			"--metrics-addr-file=/tmp/r/metrics-addr"},
		"integration": {"--kubeconfig=/tmp/k", "--fake-cards=2xT4", "--dbfile=/tmp/q/meta.db",
			"--pod-resources-socket=/tmp/kubelet/pod-resources/kubelet.sock", "--metrics-addr=127.0.0.1:0", "--reconcile-interval=1s", "-v=2"},
		// test/integration/dra_test.go and manifests/overlays/dra.
		"dra": {"--kubeconfig=/tmp/k", "--node-name=n", "--kubelet-api=dra", "--fake-cards=2xT4", "--dbfile=/tmp/q/meta.db",
			"--kubelet-plugins-dir=/tmp/q/plugins", "--kubelet-registry-dir=/tmp/q/registry", "--cdi-spec-dir=/tmp/q/cdi",
			"--cdi-node-spec-dirs=/tmp/q/cdi", "--cdi-card-kind=", "--pod-resources-socket=", "--priority-controller=false", "--metrics-addr=127.0.0.1:0", "-v=4"},
		"chaos":    {"--reconcile-interval=1s", "--health-interval=300ms", "--fake-health-file=/tmp/health"},
		"e2e-node": {"--dbfile=/var/lib/qgpu/meta.db", "--backend=env", "--fake-cards=2xT4", "--device-root=/tmp/e2e-dev"},
	}
	for _, file := range []string{"../../../manifests/agent/daemonset/daemonset.yaml"} { // the colocation agent patches only hostPID and a volume
		cases[file] = agentArgs(t, file)
	}
	for name, args := range cases {
		t.Run(filepath.Base(name), func(t *testing.T) {
			if _, err := parseFlags(args); err != nil {
				t.Errorf("%v: %v", args, err)
			}
		})
	}
}

// agentArgs returns the qgpu-agent container's args in a DaemonSet file.
func agentArgs(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(raw, &ds); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "qgpu-agent" {
			if len(c.Args) == 0 {
				t.Fatalf("%s: the qgpu-agent container has no args", path)
			}
			return c.Args
		}
	}
	t.Fatalf("%s: no qgpu-agent container", path)
	return nil
}

// TestJSONLogs runs the agent's main with --logging-format=json and a
// kubeconfig that does not exist: the failure is logged as a JSON entry,
// then printed as the plain last line.
func TestJSONLogs(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--logging-format=json", "--node-name=n1",
		"--kubeconfig="+filepath.Join(t.TempDir(), "missing"), "--fake-cards=1xT4")
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, stderr %s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	var entry struct {
		Msg string `json:"msg"`
		Err string `json:"err"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
		t.Fatalf("the first line is not a JSON log entry: %q: %v", lines[0], err)
	}
	if entry.Msg != "The agent failed" || !strings.Contains(entry.Err, "missing") {
		t.Errorf("log entry %+v", entry)
	}
	// The plain last words test/harness looks for.
	if last := lines[len(lines)-1]; len(lines) != 2 || !strings.HasPrefix(last, "qgpu-agent: kubernetes client config") {
		t.Errorf("stderr %q: want the JSON entry, then qgpu-agent: <error>", lines)
	}
}

func TestNVMLChoice(t *testing.T) {
	f := &options{fakeCards: "4xT5"}
	if _, err := f.nvmlFor(); !errors.Is(err, nvml.ErrFakeSpec) {
		t.Errorf("bad spec: %v", err)
	}
	f = &options{fakeHealthFile: "/tmp/x"}
	if _, err := f.nvmlFor(); err == nil || !strings.Contains(err.Error(), "needs --fake-cards") {
		t.Errorf("health file without fake cards: %v", err)
	}
	// Without --fake-cards the real library is used; where no driver is
	// installed, the agent must say so clearly.
	lib, err := (&options{}).nvmlFor()
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

// TestProductionLinksNoSimulation: the shipped binary cannot simulate GPU
// activity by accident: it links no package under test/ (test/fakeactivity
// is the test build test/agentsim's).
func TestProductionLinksNoSimulation(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/qgpu-scheduler/qgpu/cmd/qgpu-agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 || !slices.Contains(deps, "github.com/qgpu-scheduler/qgpu/agent") {
		t.Fatalf("go list -deps listed %d packages, without the agent: %q", len(deps), out)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/qgpu-scheduler/qgpu/test/") {
			t.Errorf("cmd/qgpu-agent links %s", d)
		}
	}
}

// TestMPSCommandArgs: the MPS control daemon DaemonSet's args parse, and
// with fake cards no control binary is run unless one is named.
func TestMPSCommandArgs(t *testing.T) {
	raw, err := os.ReadFile("../../../manifests/mps/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(raw, &ds); err != nil {
		t.Fatal(err)
	}
	args := ds.Spec.Template.Spec.Containers[0].Args
	if len(args) == 0 || args[0] != "mps-control-daemon" {
		t.Fatalf("args %v: want the mps-control-daemon subcommand first", args)
	}
	cmd := newMPSCommand()
	if err := cmd.ParseFlags(args[1:]); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if got, _ := cmd.Flags().GetString("mps-root"); got != DefaultMPSRoot {
		t.Errorf("--mps-root %q, want the agent's default %q", got, DefaultMPSRoot)
	}
	// What the agent's DaemonSet lacked for MPS: the compute capability
	// (MPS binaries, libcuda), the mounts of each card's /dev/shm, host PIDs,
	// and a life of its own (an agent rollout must not end the clients).
	spec := ds.Spec.Template.Spec
	env := map[string]string{}
	for _, e := range spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if !strings.Contains(env["NVIDIA_DRIVER_CAPABILITIES"], "compute") || env["NVIDIA_VISIBLE_DEVICES"] != "all" {
		t.Errorf("driver capabilities %q, visible devices %q: want compute and all", env["NVIDIA_DRIVER_CAPABILITIES"], env["NVIDIA_VISIBLE_DEVICES"])
	}
	// Each card's daemon binds its card's shared memory at /dev/shm in a
	// mount namespace of its own (issue 40): no node-wide one for the
	// pod, and the mount allowed (CAP_SYS_ADMIN, AppArmor unconfined).
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.MountPath == "/dev/shm" {
			t.Errorf("volume %s at /dev/shm: the cards' daemons have their own", m.Name)
		}
	}
	if sc := spec.Containers[0].SecurityContext; sc == nil || sc.AppArmorProfile == nil || sc.AppArmorProfile.Type != "Unconfined" ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Add, "SYS_ADMIN") {
		t.Errorf("security context %+v: want CAP_SYS_ADMIN and AppArmor unconfined (mount for each card's /dev/shm)", sc)
	}
	if !spec.HostPID || ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		t.Errorf("hostPID %v, update strategy %q: want true, OnDelete", spec.HostPID, ds.Spec.UpdateStrategy.Type)
	}
	if ds.Spec.Template.Spec.NodeSelector["qgpu.io/enforcement"] != "mps" {
		t.Errorf("node selector %v: want the mps nodes", spec.NodeSelector)
	}
	root, _, err := newCommand(newOptions(), &bytes.Buffer{}).Find([]string{"mps-control-daemon"})
	if err != nil || root.Name() != "mps-control-daemon" {
		t.Errorf("qgpu-agent mps-control-daemon: %v %v", root, err)
	}
}

// The args of manifests/uninstall's DaemonSet are `qgpu-agent uninstall`
// and flags that subcommand accepts, with the agent's paths.
func TestUninstallManifestArgsParse(t *testing.T) {
	raw, err := os.ReadFile("../../../manifests/uninstall/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(raw, &ds); err != nil {
		t.Fatal(err)
	}
	args := ds.Spec.Template.Spec.Containers[0].Args
	if len(args) < 2 || args[0] != "uninstall" {
		t.Fatalf("args %q, want the uninstall subcommand first", args)
	}
	cmd := newUninstallCommand(io.Discard)
	if err := cmd.ParseFlags(args[1:]); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	agent := agentArgs(t, "../../../manifests/agent/daemonset/daemonset.yaml")
	for _, f := range []string{"dbfile", "hami-region-root"} {
		v, _ := cmd.Flags().GetString(f)
		if !slices.Contains(agent, "--"+f+"="+v) {
			t.Errorf("uninstall's --%s=%s is not the agent's (%q)", f, v, agent)
		}
	}
}
