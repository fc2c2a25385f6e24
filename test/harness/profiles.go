package harness

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// policyLine is a QGPU args line naming a policy.
var policyLine = regexp.MustCompile(`(?m)^(\s*(?:node|card))Policy: \S+`)

// WithSpreadProfile appends to a scheduler configuration whose first profile
// is the qgpu-scheduler profile (whatever its policy) a second profile,
// named name: the same plugins with spread policies. Both enable QGPU in one process, as a
// cluster with a team that packs and a team that spreads configures it.
func WithSpreadProfile(cfg, name string) (string, error) {
	i := strings.Index(cfg, "profiles:\n")
	if i < 0 {
		return "", errors.New("scheduler configuration has no profiles")
	}
	first := cfg[i+len("profiles:\n"):]
	second := strings.Replace(first, "schedulerName: "+protocol.SchedulerName, "schedulerName: "+name, 1)
	second = policyLine.ReplaceAllString(second, "${1}Policy: spread")
	if second == first || !strings.Contains(second, "Policy: spread") {
		return "", errors.New("first profile is not the qgpu-scheduler profile with nodePolicy and cardPolicy")
	}
	return strings.TrimRight(cfg, "\n") + "\n" + second, nil
}

// BinpackProfile writes config/qgpu-scheduler.yaml with binpack as its
// nodePolicy and cardPolicy into dir and returns the file's path: the
// placements of Tencent qGPU's --priority=binpack, which tests that follow
// the examples card by card expect (the default profile uses fragfit).
func BinpackProfile(dir string) (string, error) {
	p, err := repoPath("config/qgpu-scheduler.yaml")
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	cfg := policyLine.ReplaceAllString(string(b), "${1}Policy: binpack")
	if !strings.Contains(cfg, "nodePolicy: binpack") || !strings.Contains(cfg, "cardPolicy: binpack") {
		return "", errors.New("config/qgpu-scheduler.yaml: no nodePolicy and cardPolicy lines")
	}
	out := filepath.Join(dir, "qgpu-scheduler-binpack.yaml")
	return out, os.WriteFile(out, []byte(cfg), 0o644)
}
