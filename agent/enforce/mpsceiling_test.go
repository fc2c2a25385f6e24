package enforce

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func TestCeilingOf(t *testing.T) {
	slice := func(gib, cores int64) protocol.Slice {
		return protocol.Slice{UUID: "GPU-1", MemoryGiB: gib, Cores: cores}
	}
	for _, tc := range []struct {
		name   string
		slices []protocol.Slice
		policy protocol.Policy
		want   MPSCeiling
	}{
		{"one slice", []protocol.Slice{slice(4, 30)}, protocol.PolicyFixedShare, MPSCeiling{4096, 30}},
		{"the largest of each", []protocol.Slice{slice(4, 60), slice(10, 20), slice(2, 10)}, protocol.PolicyFixedShare, MPSCeiling{10240, 60}},
		{"burst-share caps as fixed-share", []protocol.Slice{slice(4, 60), slice(8, 20)}, protocol.PolicyBurstShare, MPSCeiling{8192, 60}},
		{"best-effort: no thread limit", []protocol.Slice{slice(4, 30)}, protocol.PolicyBestEffort, MPSCeiling{4096, 100}},
		{"an online slice (no cores) has no thread limit", []protocol.Slice{slice(4, 30), slice(2, 0)}, protocol.PolicyFixedShare, MPSCeiling{4096, 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CeilingOf(tc.slices, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ceiling (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := CeilingOf(nil, protocol.PolicyFixedShare); err == nil {
		t.Error("no slices: no error")
	}
	if _, err := CeilingOf([]protocol.Slice{slice(0, 30)}, protocol.PolicyFixedShare); err == nil || !strings.Contains(err.Error(), "memory_mib=0") {
		t.Errorf("no memory: %v, want an error naming memory_mib=0", err)
	}
}

func TestParseMPSCeiling(t *testing.T) {
	for _, tc := range []struct {
		text string
		want MPSCeiling
		err  string // a fragment of the error; "" for none
	}{
		{"memory_mib=4096 active_thread_percentage=30\n", MPSCeiling{4096, 30}, ""},
		{"active_thread_percentage=100 memory_mib=1", MPSCeiling{1, 100}, ""},
		{"", MPSCeiling{}, "memory_mib missing"},
		{"memory_mib=4096", MPSCeiling{}, "active_thread_percentage missing"},
		{"memory_mib=0 active_thread_percentage=30", MPSCeiling{}, "memory_mib=0"},
		{"memory_mib=-5 active_thread_percentage=30", MPSCeiling{}, "memory_mib=-5"},
		{"memory_mib=4096 active_thread_percentage=0", MPSCeiling{}, "active_thread_percentage=0"},
		{"memory_mib=4096 active_thread_percentage=101", MPSCeiling{}, "active_thread_percentage=101"},
		{"memory_mib=4G active_thread_percentage=30", MPSCeiling{}, `memory_mib="4G"`},
		{"memory_mib=1 memory_mib=2 active_thread_percentage=30", MPSCeiling{}, "memory_mib given twice"},
		{"memory_mib=1 active_thread_percentage=30 uid=0", MPSCeiling{}, `unknown key "uid"`},
		{"memory_mib 1", MPSCeiling{}, "want key=value"},
	} {
		t.Run(tc.text, func(t *testing.T) {
			got, err := ParseMPSCeiling(tc.text)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got != tc.want {
					t.Errorf("got %+v, want %+v", got, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("err = %v, want one naming %s", err, tc.err)
			}
		})
	}
}

// FuzzParseMPSCeiling: whatever the file holds, a ceiling that parses is
// valid and reads back the same.
func FuzzParseMPSCeiling(f *testing.F) {
	f.Add("memory_mib=4096 active_thread_percentage=30\n")
	f.Add("memory_mib=0 active_thread_percentage=101")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseMPSCeiling(text)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%q parsed to an invalid %+v: %v", text, c, err)
		}
		back, err := ParseMPSCeiling(c.String())
		if err != nil || back != c {
			t.Fatalf("%+v reads back as %+v, %v", c, back, err)
		}
	})
}

// TestMPSCeiling: a shared card's memory Allocate asks for the largest
// slice on the card and answers only once the daemon has it in force; the
// core Allocate asks nothing; without the daemon, or without the card's
// slices, it refuses.
func TestMPSCeiling(t *testing.T) {
	root := mpsNode(t, "GPU-1")
	b := &MPS{Control: MPSRoot{Root: root, Wait: patientMPSWait}}
	r := req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, shared)
	var asked string
	r.CardSlices = func(uuid string) ([]protocol.Slice, error) {
		asked = uuid
		return []protocol.Slice{{UUID: uuid, MemoryGiB: 10, Cores: 20}, {UUID: uuid, MemoryGiB: 2, Cores: 50}}, nil
	}
	if _, err := b.Allocate(r); err != nil {
		t.Fatal(err)
	}
	if asked != "GPU-1" {
		t.Errorf("asked for the slices on %q, want GPU-1", asked)
	}
	want := "memory_mib=10240 active_thread_percentage=50\n"
	if got := readString(filepath.Join(root, "GPU-1", MPSCeilingFile)); got != want {
		t.Errorf("ceiling %q, want %q", got, want)
	}

	r.CardSlices = func(string) ([]protocol.Slice, error) { return nil, errors.New("store closed") }
	if _, err := b.Allocate(r); err == nil || !strings.Contains(err.Error(), "store closed") {
		t.Errorf("slices unknown: %v", err)
	}

	// No daemon takes it: refused, naming the file.
	alone := t.TempDir()
	os.MkdirAll(filepath.Join(alone, "GPU-1", "pipe"), 0o755)
	os.WriteFile(filepath.Join(alone, "GPU-1", MPSReadyFile), nil, 0o644)
	os.Mkdir(filepath.Join(alone, "GPU-1", MPSShmDir), 0o1777)
	b = &MPS{Control: MPSRoot{Root: alone, Wait: refusedMPSWait}}
	r = req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, shared)
	_, err := b.Allocate(r)
	if path := filepath.Join(alone, "GPU-1", MPSCeilingFile); !errors.Is(err, ErrMPSNotReady) || !strings.Contains(err.Error(), path) {
		t.Errorf("ceiling not taken: %v, want ErrMPSNotReady naming %s", err, path)
	}
	if _, err := b.Allocate(req(protocol.ResourceCore, protocol.ClassGeneral, protocol.PolicyFixedShare, shared)); err != nil {
		t.Errorf("core Allocate: %v (the ceiling rides on the memory Allocate)", err)
	}
}
