package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseLabels(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{in: "", want: map[string]string{}},
		{in: "a=b", want: map[string]string{"a": "b"}},
		{in: "a=b, c=,x.io/y=z", want: map[string]string{"a": "b", "c": "", "x.io/y": "z"}},
		{in: "a", wantErr: true},
		{in: "=b", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseLabels(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseLabels(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); !tc.wantErr && diff != "" {
				t.Errorf("parseLabels(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestWriteFileAtomicReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns_pod_c.env")
	for _, content := range []string{"A=1\n", "B=2\n"} {
		if err := writeFileAtomic(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != content {
			t.Errorf("file holds %q, want %q", got, content)
		}
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temp files left)", len(entries))
	}
}
