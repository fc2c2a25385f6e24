package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/qgpu-scheduler/qgpu/agent/cardspec"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
)

// TestCardSpecUnwritableRemovesTheOldOne: a driver root without the cards'
// device nodes writes no card spec; the one a previous start left is
// removed (its index names may be other cards by now) and the agent's kind
// is not looked up.
func TestCardSpecUnwritableRemovesTheOldOne(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, cardspec.FileName(cardspec.DefaultKind))
	if err := os.WriteFile(old, []byte("cdiVersion: 0.5.0\nkind: qgpu.io/gpu\ndevices: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cards, err := nvml.ParseFakeSpec("1xT4")
	if err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	a := &agent{cfg: Config{CDISpecDir: dir, NVML: nvml.NewFake(cards, "n", ""), CardSpec: cardspec.Options{Kind: cardspec.DefaultKind,
		DriverRoot: "/", DriverRootCtrPath: empty, DevRoot: "/", DevRootCtrPath: empty, HookPath: cardspec.HookAuto}}}
	if a.writeCardSpec() {
		t.Error("a driver root without device nodes: the card spec's kind would be looked up")
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the old card spec is still there: %v", err)
	}
	a.cfg.CardSpec.Kind = ""
	if a.writeCardSpec() {
		t.Error("--cdi-card-kind=\"\": the kind would be looked up")
	}
}
