package harness

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseNodes: the node list's entries, their options and the errors
// that name the bad part.
func TestParseNodes(t *testing.T) {
	cases := []struct {
		spec    string
		want    []NodeSpec
		wantErr string
	}{
		{spec: "t4:2xT4", want: []NodeSpec{{Name: "t4", Cards: "2xT4"}}},
		{spec: "v:2xV100:mixed", want: []NodeSpec{{Name: "v", Cards: "2xV100", Mixed: true}}},
		{spec: "d:1xA100+1xT4:dra", want: []NodeSpec{{Name: "d", Cards: "1xA100,1xT4", DRA: true}}},
		{spec: "2*m:2xV100:mixed:dra", want: []NodeSpec{{Name: "m-0", Cards: "2xV100", Mixed: true, DRA: true}, {Name: "m-1", Cards: "2xV100", Mixed: true, DRA: true}}},
		{spec: "d:2xT4:dra:dra", wantErr: `node option "dra"`},
		{spec: "d:2xT4:gpu", wantErr: `node option "gpu"`},
		{spec: "d:2xT4:mixed:dra:x", wantErr: "want"},
		{spec: "a:2xT4,a:1xT4", wantErr: "named twice"},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := ParseNodes(tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseNodes(%q) = %v, %v; want an error saying %q", tc.spec, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("ParseNodes(%q) (-want +got):\n%s", tc.spec, d)
			}
		})
	}
}
