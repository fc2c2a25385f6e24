package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Files in a node's root dir that its agent reads or writes (simArgs).
const (
	// ActivityFileName scripts which pods of a mixed node compute on their
	// fake cards: "<namespace>/<pod> busy|idle" a line (test/fakeactivity).
	ActivityFileName = "activity"
	// MetricsAddrFileName holds the agent's bound metrics address.
	MetricsAddrFileName = "metrics-addr"
	// fakeHostDir holds a mixed node's simulated cgroup tree and /proc.
	fakeHostDir = "fake-host"
)

// simArgs are the agent flags of the simulation every node gets: its
// metrics address in a file, and on mixed nodes fake pod processes and
// cgroups, so that the priority controller runs as on a real node (the
// hollow node's pods have neither).
func (n NodeSpec) simArgs(root string) []string {
	args := []string{"--metrics-addr-file=" + filepath.Join(root, MetricsAddrFileName)}
	if !n.Mixed {
		return args
	}
	return append(args,
		"--fake-activity-file="+filepath.Join(root, ActivityFileName),
		"--cgroup-root="+filepath.Join(root, fakeHostDir, "sys", "fs", "cgroup"),
		"--proc-root="+filepath.Join(root, fakeHostDir, "proc"),
	)
}

// agentBinary is the agent a node runs: the test build on mixed nodes.
func (n NodeSpec) agentBinary(shipped, sim string) string {
	if n.Mixed {
		return sim
	}
	return shipped
}

// ActivityFile is the node's activity file (mixed nodes only).
func (n *HollowNode) ActivityFile() string { return filepath.Join(n.RootDir, ActivityFileName) }

// FakeCgroupRoot is the mixed node's simulated cgroup mount.
func (n *HollowNode) FakeCgroupRoot() string {
	return filepath.Join(n.RootDir, fakeHostDir, "sys", "fs", "cgroup")
}

// SetActivity replaces the activity file with lines such as
// "default/online-pod busy", atomically.
func (n *HollowNode) SetActivity(lines ...string) error {
	return WriteActivity(n.ActivityFile(), lines...)
}

// WriteActivity writes an activity file atomically (the agent may read it
// at any moment).
func WriteActivity(path string, lines ...string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// MetricsAddr is the address the node's agent serves metrics on.
func (n *HollowNode) MetricsAddr() (string, error) { return ReadMetricsAddr(n.RootDir) }

// ReadMetricsAddr reads the metrics address the agent of the node with
// this root dir wrote.
func ReadMetricsAddr(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, MetricsAddrFileName))
	if err != nil {
		return "", fmt.Errorf("the agent's metrics address: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Metrics fetches the agent's /metrics page.
func (n *HollowNode) Metrics(ctx context.Context) (string, error) {
	addr, err := n.MetricsAddr()
	if err != nil {
		return "", err
	}
	return FetchMetrics(ctx, addr)
}

// FetchMetrics GETs http://addr/metrics.
func FetchMetrics(ctx context.Context, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	return string(b), err
}
