package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// HollowNodeOptions configures StartHollowNode.
type HollowNodeOptions struct {
	Name string
	// Kubeconfig is the kubelet's kubeconfig file (required).
	Kubeconfig string
	// RootDir receives all state of the node: kubelet dirs, the CRI socket,
	// node.log, agent.log and containers/*.env. Required.
	RootDir string
	Labels  map[string]string
	// CPU (cores), Memory (a quantity such as "64Gi") and Pods set the node's
	// capacity; zero values keep the program's defaults.
	CPU    int
	Memory string
	Pods   int
	// AgentCmd is the agent's command line (split on white space) and
	// AgentArgs extra arguments; the agent shares the node's mount namespace.
	AgentCmd  string
	AgentArgs []string
	// NoIsolate runs without a private mount namespace: only one such node
	// can run per machine, and it uses the host's /var/lib/kubelet.
	NoIsolate bool
	// Binary is the hollow node program; default $QGPU_HOLLOW_NODE_BIN, else
	// bin/qgpu-hollow-node in the repository root.
	Binary string
	// ExtraArgs are appended to the program's flags (for example "-v=4").
	ExtraArgs []string
}

// HollowNode is a running bin/qgpu-hollow-node subprocess.
type HollowNode struct {
	Name    string
	RootDir string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// StartHollowNode starts the hollow node program, which runs until Stop or
// until ctx ends. Its output goes to <RootDir>/node.log.
func StartHollowNode(ctx context.Context, opts HollowNodeOptions) (*HollowNode, error) {
	if opts.Name == "" || opts.Kubeconfig == "" || opts.RootDir == "" {
		return nil, errors.New("hollow node: Name, Kubeconfig and RootDir are required")
	}
	bin, err := binaryPath(opts.Binary, "QGPU_HOLLOW_NODE_BIN", "qgpu-hollow-node")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.RootDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating node root dir: %w", err)
	}
	logFile, err := os.Create(filepath.Join(opts.RootDir, "node.log"))
	if err != nil {
		return nil, fmt.Errorf("creating node log: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, hollowNodeArgs(opts)...)
	// When ctx ends the node gets the same clean stop as from Stop.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// If the test binary dies without cleanup, the node goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	n := &HollowNode{Name: opts.Name, RootDir: opts.RootDir, cmd: cmd, done: make(chan struct{})}
	go func() {
		n.waitErr = cmd.Wait()
		logFile.Close()
		close(n.done)
	}()
	return n, nil
}

func hollowNodeArgs(o HollowNodeOptions) []string {
	args := []string{
		"--kubeconfig=" + o.Kubeconfig,
		"--node-name=" + o.Name,
		"--root-dir=" + o.RootDir,
		"--isolate=" + strconv.FormatBool(!o.NoIsolate),
	}
	if len(o.Labels) > 0 {
		var kvs []string
		for k, v := range o.Labels {
			kvs = append(kvs, k+"="+v)
		}
		sort.Strings(kvs)
		args = append(args, "--node-labels="+strings.Join(kvs, ","))
	}
	if o.CPU > 0 {
		args = append(args, "--cpu="+strconv.Itoa(o.CPU))
	}
	if o.Memory != "" {
		args = append(args, "--memory="+o.Memory)
	}
	if o.Pods > 0 {
		args = append(args, "--pods="+strconv.Itoa(o.Pods))
	}
	if o.AgentCmd != "" {
		args = append(args, "--agent-cmd="+o.AgentCmd)
	}
	for _, a := range o.AgentArgs {
		args = append(args, "--agent-arg="+a)
	}
	return append(args, o.ExtraArgs...)
}

// Stop sends SIGTERM (the node stops its agent and exits) and SIGKILL if it
// is still running after 10 s. It is safe to call more than once.
func (n *HollowNode) Stop() error {
	select {
	case <-n.done:
		return nil
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
		return fmt.Errorf("hollow node %s ignored SIGTERM for 10s, killed", n.Name)
	}
}

// Exited reports whether the node process has ended, with its wait error.
func (n *HollowNode) Exited() (bool, error) {
	select {
	case <-n.done:
		return true, n.waitErr
	default:
		return false, nil
	}
}

// RestartDeviceManager makes the node replace its kubelet device manager
// (SIGHUP), as a kubelet restart would: kubelet.sock is re-created and
// plugins must register again.
func (n *HollowNode) RestartDeviceManager() error {
	if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("signalling hollow node %s: %w", n.Name, err)
	}
	return nil
}

// LogPath and AgentLogPath are the node's and the agent's output files.
func (n *HollowNode) LogPath() string      { return filepath.Join(n.RootDir, "node.log") }
func (n *HollowNode) AgentLogPath() string { return filepath.Join(n.RootDir, "agent.log") }

// ContainerEnv returns the environment the device plugins gave a container,
// as the node recorded it when the fake runtime created the container.
func (n *HollowNode) ContainerEnv(ns, pod, container string) (map[string]string, error) {
	path := filepath.Join(n.RootDir, "containers", fmt.Sprintf("%s_%s_%s.env", ns, pod, container))
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading recorded env of %s/%s/%s: %w", ns, pod, container, err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return env, nil
}

// WaitForCapacity polls until the Node's capacity and allocatable of
// resource both equal qty.
func WaitForCapacity(ctx context.Context, client kubernetes.Interface, node string, resource corev1.ResourceName, qty int64) error {
	var last string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		c, a := n.Status.Capacity[resource], n.Status.Allocatable[resource]
		last = fmt.Sprintf("capacity %s, allocatable %s", c.String(), a.String())
		return c.Value() == qty && a.Value() == qty, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for node %s to have %d %s (last: %s): %w", node, qty, resource, last, err)
	}
	return nil
}

// WaitForCapacity is the package function for this node.
func (n *HollowNode) WaitForCapacity(ctx context.Context, client kubernetes.Interface, resource corev1.ResourceName, qty int64) error {
	return WaitForCapacity(ctx, client, n.Name, resource, qty)
}
