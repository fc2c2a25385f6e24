package harness

import (
	"errors"
	"strings"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// WithSpreadProfile appends to a scheduler configuration whose first profile
// is the binpack qgpu-scheduler profile a second profile, named name: the
// same plugins with spread policies. Both enable QGPU in one process, as a
// cluster with a team that packs and a team that spreads configures it.
func WithSpreadProfile(cfg, name string) (string, error) {
	i := strings.Index(cfg, "profiles:\n")
	if i < 0 {
		return "", errors.New("scheduler configuration has no profiles")
	}
	first := cfg[i+len("profiles:\n"):]
	second := strings.Replace(first, "schedulerName: "+protocol.SchedulerName, "schedulerName: "+name, 1)
	second = strings.ReplaceAll(second, "Policy: binpack", "Policy: spread")
	if second == first || !strings.Contains(second, "Policy: spread") {
		return "", errors.New("first profile is not the binpack qgpu-scheduler profile")
	}
	return strings.TrimRight(cfg, "\n") + "\n" + second, nil
}
