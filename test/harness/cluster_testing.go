package harness

import (
	"context"
	"testing"
	"time"
)

// StartTestCluster starts a Cluster for t in t.TempDir() (the logs stay
// there until t ends) and stops it when t ends, logging the tails of the
// scheduler's, the nodes' and the agents' logs if t failed.
func StartTestCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := StartCluster(ctx, opts)
	if err != nil {
		t.Fatalf("starting cluster: %v", err)
	}
	t.Logf("cluster of %d nodes up in %v at %s", len(c.Nodes), time.Since(start).Round(time.Millisecond), c.URL)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("scheduler log tail:\n%s", tail(c.SchedulerLogPath(), 40))
			for _, n := range c.Nodes {
				t.Logf("node %s log tail:\n%s", n.Name, tail(n.LogPath(), 20))
				t.Logf("node %s agent log tail:\n%s", n.Name, tail(n.AgentLogPath(), 20))
			}
		}
		start := time.Now()
		if err := c.Stop(); err != nil {
			t.Errorf("stopping cluster: %v", err)
		}
		t.Logf("cluster stopped in %v", time.Since(start).Round(time.Millisecond))
	})
	return c
}
