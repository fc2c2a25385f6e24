package app

import (
	"strings"
	"testing"

	"github.com/qgpu-scheduler/qgpu/agent/mpsguard"
)

// --mps-foreign-process-policy: report by default, evict when asked, and
// anything else refused before the agent starts, naming the flag.
func TestMPSForeignProcessPolicyFlag(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	f, err := parseFlags([]string{"--node-name=n1"})
	if err != nil || f.MPSForeignProcessPolicy != string(mpsguard.PolicyReport) {
		t.Errorf("default: %q, %v; want report", f.MPSForeignProcessPolicy, err)
	}
	f, err = parseFlags([]string{"--node-name=n1", "--mps-foreign-process-policy=evict"})
	if err != nil || f.MPSForeignProcessPolicy != string(mpsguard.PolicyEvict) {
		t.Errorf("evict: %q, %v", f.MPSForeignProcessPolicy, err)
	}
	f, err = parseFlags([]string{"--node-name=n1", "--mps-foreign-process-policy=kill"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "--mps-foreign-process-policy") {
		t.Errorf("kill: Validate() = %v, want an error naming the flag", err)
	}
}
