package nodeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func node(labels map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: labels}}
}

func TestPolicyLabel(t *testing.T) {
	tests := []struct {
		value   string
		present bool
		want    protocol.Policy
		warn    bool
	}{
		{present: false, want: protocol.PolicyBestEffort},
		{value: "best-effort", present: true, want: protocol.PolicyBestEffort},
		{value: "be", present: true, want: protocol.PolicyBestEffort},
		{value: "fixed-share", present: true, want: protocol.PolicyFixedShare},
		{value: "fs", present: true, want: protocol.PolicyFixedShare},
		{value: "BS", present: true, want: protocol.PolicyBurstShare},
		{value: "burst-share", present: true, want: protocol.PolicyBurstShare},
		{value: "", present: true, want: protocol.PolicyBestEffort},
		{value: "guaranteed", present: true, want: protocol.PolicyBestEffort, warn: true},
	}
	for _, tc := range tests {
		t.Run(tc.value, func(t *testing.T) {
			rec := record.NewFakeRecorder(4)
			c := &Config{Node: "n1", DefaultBackend: enforce.NameEnv, Recorder: rec}
			labels := map[string]string{}
			if tc.present {
				labels[protocol.LabelSchedulePolicy] = tc.value
			}
			b, got, err := c.Resolve(node(labels))
			if err != nil || b.Name() != enforce.NameEnv || got != tc.want {
				t.Fatalf("got %v %v %v, want env %v", b, got, err, tc.want)
			}
			if warned := len(rec.Events) == 1; warned != tc.warn {
				t.Fatalf("warning event: %v, want %v", warned, tc.warn)
			}
			if tc.warn {
				if e := <-rec.Events; !strings.Contains(e, "Warning "+ReasonBadPolicy) || !strings.Contains(e, tc.value) {
					t.Errorf("event %q", e)
				}
				// The same bad value is reported once, not on every Allocate.
				c.Resolve(node(labels))
				if len(rec.Events) != 0 {
					t.Error("warned twice for the same value")
				}
			}
		})
	}
}

func TestBackendLabel(t *testing.T) {
	libDir := t.TempDir()
	rec := record.NewFakeRecorder(4)
	c := &Config{Node: "n1", DefaultBackend: enforce.NameEnv, Recorder: rec,
		Options: enforce.Options{MPSRoot: t.TempDir(), HAMi: enforce.HAMiOptions{LibDir: libDir,
			RegionRoot: filepath.Join(t.TempDir(), "regions"), LockDir: filepath.Join(t.TempDir(), "lock")}}}
	if b, _, err := c.Resolve(node(map[string]string{protocol.LabelEnforcement: "mps"})); err != nil || b.Name() != enforce.NameMPS {
		t.Errorf("mps: %v %v", b, err)
	}
	if b, _, err := c.Resolve(node(map[string]string{protocol.LabelEnforcement: "qgpu"})); err != nil || b.Name() != enforce.NameEnv || len(rec.Events) != 1 {
		t.Errorf("unknown backend: %v %v, %d events", b, err, len(rec.Events))
	}
	if _, _, err := c.Resolve(node(map[string]string{protocol.LabelEnforcement: "hami-core"})); err == nil {
		t.Error("hami-core without the library: no error")
	}
	os.WriteFile(filepath.Join(libDir, enforce.HAMiLibName), []byte("ELF"), 0o644)
	if b, _, err := c.Resolve(node(map[string]string{protocol.LabelEnforcement: "hami-core"})); err != nil || b.Name() != enforce.NameHAMiCore {
		t.Errorf("hami-core once installed: %v %v", b, err)
	}
	if b, p, err := c.Current(); err != nil || b.Name() != enforce.NameEnv || p != protocol.DefaultPolicy {
		t.Errorf("without a watch: %v %v %v", b, p, err)
	}
}

func FuzzPolicyLabel(f *testing.F) {
	for _, s := range []string{"", "be", "fs", "bs", "best-effort", "Fixed-Share", " burst-share ", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		rec := record.NewFakeRecorder(8)
		c := &Config{Node: "n1", DefaultBackend: enforce.NameEnv, Recorder: rec}
		_, got, err := c.Resolve(node(map[string]string{protocol.LabelSchedulePolicy: value, protocol.LabelEnforcement: value}))
		if err != nil {
			t.Fatal(err)
		}
		switch got {
		case protocol.PolicyBestEffort, protocol.PolicyFixedShare, protocol.PolicyBurstShare:
		default:
			t.Fatalf("policy %q", got)
		}
		if _, perr := protocol.ParsePolicy(value); (perr != nil) != (len(rec.Events) > 0 && strings.Contains(<-rec.Events, ReasonBadPolicy)) {
			t.Fatalf("value %q: parse error %v but events do not match", value, perr)
		}
	})
}
