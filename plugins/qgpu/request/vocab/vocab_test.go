package vocab

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Vocabulary
		wantErr string
	}{
		{"vcuda", VCUDA, ""},
		{" T9k ", T9k, ""},
		{"HAMI", HAMi, ""},
		{"volcano", "", `unknown vocabulary "volcano": must be one of vcuda, t9k, hami`},
		{"", "", `unknown vocabulary "": must be one of vcuda, t9k, hami`},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("Parse(%q) error %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// Every resource belongs to exactly one vocabulary, and is either
// advertised by the agent or left to the ledger, never both.
func TestResourcesPartition(t *testing.T) {
	var all []string
	for _, v := range All {
		for _, r := range Resources(v) {
			if got, ok := Of(r); !ok || got != v {
				t.Errorf("Of(%s) = %q, %v; want %q", r, got, ok, v)
			}
			all = append(all, r)
		}
		for _, r := range Advertised(v) {
			if !slices.Contains(Resources(v), r) {
				t.Errorf("%s advertises %s, not one of its resources", v, r)
			}
		}
	}
	var split []string
	for _, v := range All {
		split = append(split, Advertised(v)...)
	}
	split = append(split, Unadvertised()...)
	slices.Sort(all)
	slices.Sort(split)
	if diff := cmp.Diff(all, split); diff != "" {
		t.Errorf("advertised + unadvertised != all resources (-all +split):\n%s", diff)
	}
	if _, ok := Of("tke.cloud.tencent.com/qgpu-memory"); ok {
		t.Error("a native resource belongs to a vocabulary")
	}
}
