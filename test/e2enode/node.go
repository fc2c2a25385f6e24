package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DeviceRoot is where each node's fake device nodes appear, in the node's
// own mount namespace: dev/ of its driver root. The agent gets
// --device-root=DeviceRoot and a hostPath volume of the driver root.
const DeviceRoot = FakeDriverRoot + "/dev"

// node is one node: containerd and the real kubelet in a mount namespace of
// their own, so that each has its own /var/lib/kubelet (the device manager's
// socket path is fixed) and nothing they mount reaches the host.
type node struct {
	name   string
	dir    string // host-visible state: kubelet/, pods/ (container logs), dev/, *.log
	labels []string
	prefix string // the pods' 169.254.x.0/24
	ports  [2]int // the kubelet's port and its healthz port
	runner *proc
	mode   runtimeMode
	// devicePluginSpec: the node has the per-card spec NVIDIA's device
	// plugin writes (k8s.device-plugin.nvidia.com/gpu) and its agent
	// writes none of its own (--cdi-card-kind="").
	devicePluginSpec bool
	// dra: the DRA leg's node (dra.go), whose agent runs in DRA mode; the
	// device-plugin checks leave it out.
	dra bool
}

// nodeEnv is what every node needs from the e2e program.
type nodeEnv struct {
	binDir      string // containerd, ctr, containerd-shim-runc-v2, kubelet, qgpu-e2e-cni
	images      []string
	pauseImage  string
	proxySocket string
	serviceIP   string
}

// start writes the node's configuration, creates its fake cards' device
// nodes, and runs `unshare -m <self> node <dir>`: the runner (runNode)
// mounts, starts containerd and the kubelet, and stops them on SIGTERM.
func (n *node) start(env nodeEnv, kubeconfig string, cards int) error {
	for _, d := range []string{"kubelet", "pods", "containers", "qgpu", "driver", "toolkit", "cni", "cni-data", "pki", "containerd"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := writeDriverRoot(n.dir, cards); err != nil {
		return err
	}
	if err := installToolkit(n.dir, env.binDir, n.mode); err != nil {
		return err
	}
	if err := writeNodeFiles(n.dir, n.name, cards, n.devicePluginSpec); err != nil {
		return err
	}
	files := map[string]string{
		"containerd.toml":          containerdConfig(n.dir, env, n.mode),
		"kubelet.yaml":             kubeletConfig(n.dir, n.ports, cgroupRoot(n.name)),
		"cni/10-qgpu-e2e.conflist": cniConfig(n.dir, n.prefix, env),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := checkPrivateSockets(filepath.Join(env.binDir, "containerd"), n.dir); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"-m", "--propagation", "private", self, "node",
		"--dir", n.dir, "--name", n.name, "--bin-dir", env.binDir, "--kubeconfig", kubeconfig,
		"--labels", strings.Join(n.labels, ",")}
	for _, img := range env.images {
		args = append(args, "--image", img)
	}
	log, err := os.Create(filepath.Join(n.dir, "runner.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command("unshare", args...)
	cmd.Stdout, cmd.Stderr = log, log
	runner, err := startProc(cmd, syscall.SIGTERM)
	if err != nil {
		return err
	}
	n.runner = runner
	return nil
}

func (n *node) exited() bool { return n.runner.exited() }

// stop asks the runner to stop everything it started and waits (bounded).
func (n *node) stop() {
	if n.runner == nil {
		return
	}
	n.runner.terminate(60 * time.Second)
	unmountNodeFiles(n.dir)
}

// makeDevices creates nvidia0..cards-1 and nvidiactl as character devices
// with the driver's major number 195, as the NVIDIA driver does.
func makeDevices(dir string, cards int) error {
	mk := func(name string, minor uint32) error {
		p := filepath.Join(dir, name)
		_ = os.Remove(p)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(195, minor))); err != nil {
			return fmt.Errorf("mknod %s: %w", p, err)
		}
		return nil
	}
	for i := range cards {
		if err := mk("nvidia"+strconv.Itoa(i), uint32(i)); err != nil {
			return err
		}
	}
	return mk("nvidiactl", 255)
}

// cgroupRoot is the node's own cgroup parent: two kubelets sharing the
// host's kubepods cgroups each take the other's pods for orphans and kill them.
func cgroupRoot(node string) string { return "/qgpu-e2e-" + node }

// runNode is the runner, inside the node's mount namespace.
func runNode(args []string) error {
	var dir, name, binDir, kubeconfig, labels string
	var images multiFlag
	fs := newFlagSet("node")
	fs.StringVar(&dir, "dir", "", "")
	fs.StringVar(&name, "name", "", "")
	fs.StringVar(&binDir, "bin-dir", "", "")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "")
	fs.StringVar(&labels, "labels", "", "")
	fs.Var(&images, "image", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := nodeMounts(dir); err != nil {
		return err
	}
	if err := generateManagementSpec(binDir); err != nil {
		return err
	}
	cgroups, err := makeCgroupRoot(cgroupRoot(name))
	defer removeCgroups(cgroups)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	sock := filepath.Join(dir, "containerd.sock")
	containerd := &component{dir: dir, name: "containerd", bin: filepath.Join(binDir, "containerd"),
		args: []string{"--config", filepath.Join(dir, "containerd.toml")}}
	kubelet := &component{dir: dir, name: "kubelet", bin: filepath.Join(binDir, "kubelet"),
		args: []string{"--config", filepath.Join(dir, "kubelet.yaml"), "--kubeconfig", kubeconfig,
			"--hostname-override", name, "--node-ip", "127.0.0.1", "--cert-dir", filepath.Join(dir, "pki"),
			"--node-labels", labels, "--v", "2"}}
	shim := filepath.Join(binDir, "containerd-shim-runc-v2")
	defer teardown(dir, shim, kubelet, containerd)
	if err := containerd.start(); err != nil {
		return err
	}
	if err := waitFor(ctx, 60*time.Second, "containerd socket", func() bool { _, err := os.Stat(sock); return err == nil }); err != nil {
		return err
	}
	for _, img := range images {
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "ctr"), "--address", sock, "-n", "k8s.io", "images", "import", img)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("importing %s: %v: %s", img, err, out)
		}
	}
	if err := kubelet.start(); err != nil {
		return err
	}
	return supervise(ctx, containerd, kubelet)
}

// supervise restarts containerd or the kubelet when one exits on its own
// (component.restart) until ctx ends.
func supervise(ctx context.Context, containerd, kubelet *component) error {
	for {
		// A stop during restart's delay leaves the exited component's
		// done channel closed: the select below must not see it again.
		if ctx.Err() != nil {
			return nil
		}
		var exited *component
		select {
		case <-ctx.Done():
			return nil
		case <-containerd.proc.done:
			exited = containerd
		case <-kubelet.proc.done:
			exited = kubelet
		}
		fmt.Printf("%s %s exited: %v; restarting it\n", time.Now().Format(time.RFC3339Nano), exited.name, exited.proc.err)
		if err := exited.restart(ctx); err != nil {
			return err
		}
	}
}

// stateBinds are the node's state directories: under its dir, mounted
// where the kubelet and the agent keep them.
var stateBinds = [][2]string{
	{"kubelet", "/var/lib/kubelet"}, {"pods", "/var/log/pods"}, {"containers", "/var/log/containers"},
	{"qgpu", "/var/lib/qgpu"}, {"driver", FakeDriverRoot},
}

// privateBinds are every bind mount of a node: its state and what a GPU
// node has installed (nodeBinds).
func privateBinds() [][2]string { return append(append([][2]string{}, stateBinds...), nodeBinds...) }

// nodeTmpfs are the runtime directories each node gets as a tmpfs of its
// own: pod network namespaces, containerd's shim sockets, and NRI's socket
// (containerd removes and re-creates /var/run/nri/nri.sock at start: two
// nodes sharing it race, and the loser's CRI plugin, so its containerd, exits).
var nodeTmpfs = []string{"/run/netns", "/run/containerd", "/run/nri"}

// nodeMounts gives the node its own /var/lib/kubelet, /var/log/pods,
// /var/lib/qgpu, device root, netns and containerd runtime directories,
// bind-mounted from dir so that the e2e program reads them from the host,
// or a tmpfs (nodeTmpfs).
func nodeMounts(dir string) error {
	for _, b := range privateBinds() {
		src := filepath.Join(dir, b[0])
		if err := os.MkdirAll(b[1], 0o755); err != nil {
			return err
		}
		if err := unix.Mount(src, b[1], "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s on %s: %w", src, b[1], err)
		}
	}
	for _, t := range nodeTmpfs {
		if err := os.MkdirAll(t, 0o755); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", t, "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("mounting tmpfs on %s: %w", t, err)
		}
	}
	return nil
}

// teardown stops the kubelet, then every container and shim containerd
// started (by the pids it recorded), then containerd; the mount namespace,
// and every mount in it, goes with its last process.
func teardown(dir, shim string, kubelet, containerd *component) {
	if kubelet.proc != nil {
		kubelet.proc.terminate(15 * time.Second)
	}
	killContainers(dir, shim)
	if containerd.proc != nil {
		containerd.proc.terminate(15 * time.Second)
	}
	killContainers(dir, shim)
}

// killContainers kills the containers' init processes, by the init.pid
// files runc's shim writes in each task's bundle, and the shims of this
// node's containerd: the processes running the shim binary with this node's
// containerd socket as -address.
func killContainers(dir, shim string) {
	files, _ := filepath.Glob(filepath.Join(dir, "containerd", "state", "io.containerd.runtime.v2.task", "*", "*", "init.pid"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	sock := filepath.Join(dir, "containerd.sock")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) == 0 || args[0] != shim {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == sock {
				if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}
}

// makeCgroupRoot creates root in every cgroup v1 hierarchy (and the v2 one)
// under /sys/fs/cgroup, as the kubelet requires of its --cgroup-root.
func makeCgroupRoot(root string) ([]string, error) {
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil, err
	}
	var made []string
	for _, e := range entries {
		if !e.IsDir() { // cpu,cpuacct style links
			continue
		}
		d := filepath.Join("/sys/fs/cgroup", e.Name(), root)
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return made, fmt.Errorf("creating cgroup %s: %w", d, err)
		}
		made = append(made, d)
	}
	return made, nil
}

// removeCgroups removes the node's cgroups, deepest first (only empty
// cgroups can be removed: every process in them is gone by now).
func removeCgroups(roots []string) {
	// Exited processes leave their cgroups a moment later: a few tries.
	for attempt := 0; attempt < 20 && removeCgroupsOnce(roots) > 0; attempt++ {
		time.Sleep(250 * time.Millisecond)
	}
}

// removeCgroupsOnce returns how many cgroups are left.
func removeCgroupsOnce(roots []string) int {
	left := 0
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
				left++
			}
		}
	}
	return left
}

// waitFor polls cond every 100 ms until it holds, ctx ends or d passes.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
