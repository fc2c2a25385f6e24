package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ClusterOptions configures StartCluster. The zero value is DefaultNodes
// with RBAC off.
type ClusterOptions struct {
	// Nodes are the simulated qGPU nodes; nil means ParseNodes(DefaultNodes).
	Nodes []NodeSpec
	// RBAC turns on Node,RBAC authorization and runs the scheduler and the
	// agents with the ServiceAccounts and rules of manifests/ (applied by
	// StartCluster); the nodes use system:node:<name> certificates.
	// Without it every component is admin.
	RBAC bool
	// Admission applies the shipped admission policies (manifests/admission:
	// the protected annotations, and qgpu-scheduler required of every pod
	// that asks for qGPU resources, with the request rules) as a deployment
	// does. It needs RBAC: the policies name the components' ServiceAccounts.
	Admission bool
	// Profile is a scheduler profile such as config/qgpu-scheduler-spread.yaml
	// (the profiles keep their lease in qgpu-system, where the RBAC grants it).
	// Empty: the config the manifests deploy (manifests/scheduler/config.yaml),
	// i.e. what a real deployment runs.
	Profile string
	// Dir receives everything: controlplane/, kubeconfig, scheduler.log,
	// nodes/<name>/ (node.log, agent.log, meta.db, containers/). Empty: a
	// temporary directory removed by Stop.
	Dir string
	// SchedulerArgs and AgentArgs are extra flags, e.g. "--v=4".
	SchedulerArgs []string
	AgentArgs     []string
	// AgentArgsFor, if set, returns more agent flags for one node, after
	// AgentArgs (a flag given twice takes the last value): test/chaos
	// points an agent's kubelet sockets at its fault proxies in root.
	AgentArgsFor func(spec NodeSpec, root string) []string
	// NodeArgs are extra flags of every hollow node program, e.g.
	// "--node-lease-duration-seconds=10".
	NodeArgs []string
	// RestartableAPIServer puts a loopback forwarder in front of the
	// apiserver so that RestartAPIServer can restart it on the same URL
	// (ControlPlaneOptions.Restartable).
	RestartableAPIServer bool
	// APIServerFlags are extra kube-apiserver flags
	// (ControlPlaneOptions.ExtraFlags), e.g. the feature gate DRA claims
	// need: "--feature-gates=DRAConsumableCapacity=true" (docs/dra.md).
	APIServerFlags []string
	// Logf receives the control plane's progress messages; nil discards them.
	Logf func(format string, args ...any)
}

// Cluster is a control plane, the real qgpu-scheduler binary and hollow
// nodes each running the real qgpu-agent on fake cards.
type Cluster struct {
	*ControlPlane
	Scheduler *Scheduler
	Nodes     []*ClusterNode
	// Kubeconfig is an admin kubeconfig file (kubectl, kubectl-qgpu).
	Kubeconfig string
	// Dir holds all state and logs (see ClusterOptions.Dir).
	Dir string

	removeDir bool
}

// ClusterNode is a hollow node of a Cluster and what it was made from.
type ClusterNode struct {
	*HollowNode
	Spec NodeSpec
}

// StartCluster brings a cluster up and returns once every node publishes
// its cards (inventory annotation and device-plugin capacity). ctx bounds
// the start only; the cluster runs until Stop.
func StartCluster(ctx context.Context, opts ClusterOptions) (_ *Cluster, err error) {
	if opts.Nodes == nil {
		if opts.Nodes, err = ParseNodes(DefaultNodes); err != nil {
			return nil, err
		}
	}
	c := &Cluster{Dir: opts.Dir}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "qgpu-cluster-"); err != nil {
			return nil, fmt.Errorf("creating cluster dir: %w", err)
		}
		c.removeDir = true
	} else if c.Dir, err = filepath.Abs(c.Dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	cpDir := filepath.Join(c.Dir, "controlplane")
	if err := os.MkdirAll(cpDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating control plane dir: %w", err)
	}
	c.ControlPlane, err = StartControlPlane(ctx, ControlPlaneOptions{RBAC: opts.RBAC, Dir: cpDir, Logf: opts.Logf, Restartable: opts.RestartableAPIServer, ExtraFlags: opts.APIServerFlags})
	if err != nil {
		return nil, err
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := c.WriteKubeconfig(c.Kubeconfig); err != nil {
		return nil, err
	}
	schedKC, agentKC, err := c.componentCredentials(ctx, opts.RBAC, opts.Admission, slices.ContainsFunc(opts.Nodes, func(n NodeSpec) bool { return n.DRA }))
	if err != nil {
		return nil, err
	}
	if err := c.startScheduler(ctx, opts, schedKC); err != nil {
		return nil, err
	}
	if err := c.startNodes(ctx, opts, agentKC); err != nil {
		return nil, err
	}
	return c, c.waitReady(ctx)
}

// componentCredentials writes the scheduler's and the agent's kubeconfigs:
// with RBAC, tokens of the manifests' ServiceAccounts bound to the
// manifests' rules and the agent's own-node policy (applied here; with DRA
// nodes also the DRA component's rules and ResourceSlice policy), and ""
// for the agent: each node's agent gets a token of its own (agentKubeconfig);
// otherwise the admin kubeconfig.
func (c *Cluster) componentCredentials(ctx context.Context, rbac, admission, dra bool) (scheduler, agent string, err error) {
	if admission && !rbac {
		return "", "", errors.New("ClusterOptions.Admission needs RBAC: the policies name the components' ServiceAccounts")
	}
	// The scheduler's lease lives in qgpu-system, with or without RBAC.
	files := []string{"manifests/namespace.yaml"}
	if rbac {
		files = append(files, "manifests/scheduler/rbac.yaml", "manifests/agent/rbac.yaml", "manifests/agent/own-node-policy.yaml")
		if dra {
			files = append(files, "manifests/overlays/dra/rbac.yaml", "manifests/overlays/dra/resourceslice-policy.yaml")
		}
	}
	if admission {
		files = append(files, "manifests/admission")
	}
	objs, err := ReadManifests(files...)
	if err != nil {
		return "", "", err
	}
	if err := Apply(ctx, c.Config, objs, false); err != nil {
		return "", "", err
	}
	if admission {
		if err := WaitRequireScheduler(ctx, c.Client); err != nil {
			return "", "", err
		}
	}
	if !rbac {
		return c.Kubeconfig, c.Kubeconfig, nil
	}
	scheduler = filepath.Join(c.Dir, "scheduler.kubeconfig")
	if err := c.KubeconfigForServiceAccount(ctx, "qgpu-system", "qgpu-scheduler", scheduler); err != nil {
		return "", "", err
	}
	return scheduler, "", nil
}

func (c *Cluster) startScheduler(ctx context.Context, opts ClusterOptions, kubeconfig string) error {
	config, err := schedulerConfig(opts.Profile)
	if err != nil {
		return err
	}
	configPath := filepath.Join(c.Dir, "scheduler-config.yaml")
	if err := os.WriteFile(configPath, config, 0o644); err != nil {
		return fmt.Errorf("writing scheduler config: %w", err)
	}
	// Where a deployment from manifests/ keeps it, for kubectl-qgpu's
	// pods-per-card limit.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "qgpu-system", Name: "qgpu-scheduler-config"},
		Data: map[string]string{"config.yaml": string(config)}}
	if _, err := c.Client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the scheduler's ConfigMap: %w", err)
	}
	c.Scheduler, err = StartScheduler(ctx, SchedulerOptions{
		Kubeconfig: kubeconfig, Profile: configPath, LogPath: c.SchedulerLogPath(), Args: opts.SchedulerArgs,
	})
	return err
}

// SchedulerLogPath is the scheduler's output file.
func (c *Cluster) SchedulerLogPath() string { return filepath.Join(c.Dir, "scheduler.log") }

// schedulerConfig returns the KubeSchedulerConfiguration the scheduler
// runs: the generated ConfigMap's, or profile.
func schedulerConfig(profile string) ([]byte, error) {
	if profile != "" {
		p, err := repoPath(profile)
		if err != nil {
			return nil, err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading profile: %w", err)
		}
		return b, nil
	}
	p, err := repoPath("manifests/scheduler/config.yaml")
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("reading the scheduler's configuration: %w", err)
	}
	return b, nil
}

// startNodes starts one hollow node per spec, each with its agent on fake cards.
func (c *Cluster) startNodes(ctx context.Context, opts ClusterOptions, agentKubeconfig string) error {
	agentBin, err := BinaryPath("", "QGPU_AGENT_BIN", "qgpu-agent")
	if err != nil {
		return err
	}
	// Mixed nodes simulate their pods' GPU activity, which only the test
	// build of the agent can (test/agentsim); the others run the shipped one.
	simBin := ""
	if slices.ContainsFunc(opts.Nodes, func(s NodeSpec) bool { return s.Mixed }) {
		if simBin, err = BinaryPath("", "QGPU_AGENT_SIM_BIN", "qgpu-agent-sim"); err != nil {
			return err
		}
	}
	for _, spec := range opts.Nodes {
		root := filepath.Join(c.Dir, "nodes", spec.Name)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return fmt.Errorf("creating node dir: %w", err)
		}
		if err := spec.writeCardSpec(root); err != nil {
			return err
		}
		kubeconfig := filepath.Join(root, "kubeconfig")
		if err := c.KubeconfigForUser(kubeconfig, "system:node:"+spec.Name, "system:nodes"); err != nil {
			return err
		}
		agentKubeconfig := agentKubeconfig
		if agentKubeconfig == "" {
			if agentKubeconfig, err = c.agentKubeconfig(ctx, spec.Name, root); err != nil {
				return err
			}
		}
		args := append([]string{
			"--fake-cards=" + spec.Cards,
			"--dbfile=" + filepath.Join(root, "meta.db"),
			"--metrics-addr=127.0.0.1:0",
			"--kubeconfig=" + agentKubeconfig,
			// The hollow kubelet's PodResources API, for the reconciler.
			"--pod-resources-socket=" + filepath.Join(root, "kubelet", "pod-resources", "kubelet.sock"),
		}, append(append(spec.simArgs(root), spec.draAgentArgs(root)...), opts.AgentArgs...)...)
		if opts.AgentArgsFor != nil {
			args = append(args, opts.AgentArgsFor(spec, root)...)
		}
		// The node must outlive ctx, which bounds the start only.
		n, err := StartHollowNode(context.WithoutCancel(ctx), HollowNodeOptions{
			Name: spec.Name, Kubeconfig: kubeconfig, RootDir: root, Labels: spec.labels(),
			AgentCmd: spec.agentBinary(agentBin, simBin), AgentArgs: args,
			ExtraArgs: append(spec.draNodeArgs(root), opts.NodeArgs...),
		})
		if err != nil {
			return err
		}
		c.Nodes = append(c.Nodes, &ClusterNode{HollowNode: n, Spec: spec})
	}
	return nil
}

// waitReady waits until every node has its inventory annotation and the
// qgpu-core capacity of all its cards, failing early if a process has exited.
func (c *Cluster) waitReady(ctx context.Context) error {
	for _, n := range c.Nodes {
		var last string
		var exitErr error
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			if exitErr = c.exited(); exitErr != nil {
				return false, exitErr
			}
			node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			core := node.Status.Allocatable[protocol.ResourceCore]
			inv, err := protocol.DecodeInventory([]byte(node.Annotations[protocol.AnnotationInventory]))
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if n.Spec.DRA {
				return c.servesClaims(ctx, n.Name, len(inv.Cards), &last)
			}
			last = fmt.Sprintf("%d cards in the inventory, allocatable %s %s", len(inv.Cards), protocol.ResourceCore, core.String())
			return core.Value() == int64(len(inv.Cards)*protocol.CoresPerCard), nil
		})
		if exitErr != nil {
			return exitErr
		}
		if err != nil {
			return fmt.Errorf("node %s not ready (%s): %w\nnode log tail:\n%s\nagent log tail:\n%s",
				n.Name, last, err, tail(n.LogPath(), 15), tail(n.AgentLogPath(), 15))
		}
	}
	return nil
}

// servesClaims reports whether a DRA node's agent published its cards:
// a ResourceSlice of the driver in the pool named after the node with one
// device per card of its inventory (the scheduler places claims on such
// nodes only). last says what was seen.
func (c *Cluster) servesClaims(ctx context.Context, node string, cards int, last *string) (bool, error) {
	slices, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + protocol.DRADriver})
	if err != nil {
		*last = err.Error()
		return false, nil
	}
	devices := 0
	for _, s := range slices.Items {
		if s.Spec.Pool.Name == node {
			devices += len(s.Spec.Devices)
		}
	}
	*last = fmt.Sprintf("%d cards in the inventory, %d devices in ResourceSlices of %s", cards, devices, protocol.DRADriver)
	return cards > 0 && devices == cards, nil
}

// exited returns an error if the scheduler or a node has ended.
func (c *Cluster) exited() error {
	if c.Scheduler != nil && c.Scheduler.Exited() {
		return fmt.Errorf("qgpu-scheduler exited; log tail:\n%s", tail(c.SchedulerLogPath(), 20))
	}
	for _, n := range c.Nodes {
		if done, err := n.Exited(); done {
			return fmt.Errorf("hollow node %s exited (%v); log tail:\n%s", n.Name, err, tail(n.LogPath(), 20))
		}
		// The node does not restart its agent; cmd/qgpu-agent's last words
		// are "qgpu-agent: <error>".
		if last := tail(n.AgentLogPath(), 1); strings.HasPrefix(last, "qgpu-agent: ") {
			return fmt.Errorf("the agent of node %s exited: %s", n.Name, strings.TrimPrefix(last, "qgpu-agent: "))
		}
	}
	return nil
}

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *ClusterNode {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Stop stops the nodes (with their agents) and the scheduler in parallel,
// then the control plane, and removes Dir if StartCluster created it. It
// is safe to call more than once; it returns the nodes' stop errors.
func (c *Cluster) Stop() error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Go(func() {
			if err := n.Stop(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	if s := c.Scheduler; s != nil {
		wg.Go(s.Stop)
	}
	wg.Wait()
	if c.ControlPlane != nil {
		c.ControlPlane.Stop()
	}
	if c.removeDir {
		_ = os.RemoveAll(c.Dir)
		c.removeDir = false
	}
	return errors.Join(errs...)
}
