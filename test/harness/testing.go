package harness

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Start starts a control plane for t and stops it when t ends. Components
// started after it (hollow nodes, the scheduler) register their own
// cleanups later, so they stop first and no client outlives the apiserver.
func Start(t testing.TB) *ControlPlane {
	return StartWith(t, ControlPlaneOptions{})
}

// StartWith is Start with options; a nil opts.Logf logs through t.Logf.
func StartWith(t testing.TB, opts ControlPlaneOptions) *ControlPlane {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	cp, err := StartControlPlane(ctx, opts)
	if err != nil {
		t.Fatalf("starting control plane: %v", err)
	}
	t.Logf("control plane up in %v at %s", time.Since(start).Round(time.Millisecond), cp.URL)
	t.Cleanup(func() {
		start := time.Now()
		cp.Stop()
		t.Logf("control plane stopped in %v", time.Since(start).Round(time.Millisecond))
	})
	return cp
}

// StartNode starts a hollow node for t with a kubeconfig of the node's own
// identity (system:node:<name>, as the Node authorizer expects), a root dir
// in t.TempDir(), and a cleanup that stops it and, if t failed, logs the
// tails of node.log and agent.log.
func StartNode(t testing.TB, cp *ControlPlane, opts HollowNodeOptions) *HollowNode {
	t.Helper()
	if opts.RootDir == "" {
		opts.RootDir = t.TempDir()
	}
	if opts.Kubeconfig == "" {
		opts.Kubeconfig = filepath.Join(opts.RootDir, "kubeconfig")
		if err := cp.KubeconfigForUser(opts.Kubeconfig, "system:node:"+opts.Name, "system:nodes"); err != nil {
			t.Fatalf("writing kubeconfig for node %s: %v", opts.Name, err)
		}
	}
	n, err := StartHollowNode(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting hollow node %s: %v", opts.Name, err)
	}
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("stopping hollow node: %v", err)
		}
		if t.Failed() {
			t.Logf("node %s log tail:\n%s", n.Name, tail(n.LogPath(), 40))
			t.Logf("node %s agent log tail:\n%s", n.Name, tail(n.AgentLogPath(), 20))
		}
	})
	return n
}

// tail returns the last n lines of a file, or why it could not be read.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// StartQGPUScheduler runs the real scheduler binary with profile against cp
// with admin credentials, stopping it when t ends and logging its tail if t
// failed. It creates the namespace of the profiles' lease (qgpu-system).
func StartQGPUScheduler(t testing.TB, cp *ControlPlane, profile string, args ...string) *Scheduler {
	t.Helper()
	ns, err := ReadManifests("manifests/namespace.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Apply(ctx, cp.Config, ns, false); err != nil {
		t.Fatalf("creating the scheduler's namespace: %v", err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatalf("writing kubeconfig: %v", err)
	}
	s, err := StartScheduler(context.Background(), SchedulerOptions{
		Kubeconfig: kubeconfig, Profile: profile, LogPath: filepath.Join(dir, "scheduler.log"), Args: args,
	})
	if err != nil {
		t.Fatalf("starting scheduler: %v", err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("scheduler log tail:\n%s", tail(s.LogPath, 40))
		}
	})
	return s
}
