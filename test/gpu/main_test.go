package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestDispatch(t *testing.T) {
	dir := t.TempDir()
	capped := writeFile(t, dir, "capped", "memcap pid=1 total_bytes=4294967296 free_bytes=1\nalloc bytes=3221225472 result=ok\nalloc bytes=5368709120 result=cudaErrorMemoryAllocation\n")
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{nil, 2, ""},
		{[]string{"nonsense"}, 2, ""},
		{[]string{"judge"}, 2, ""},
		{[]string{"judge", "memcap", "--log", capped, "--want", "capped"}, 0, "verdict PASS total 4096 MiB"},
		{[]string{"judge", "memcap", "--log", capped, "--want", "uncapped"}, 1, "verdict FAIL"},
		{[]string{"judge", "memcap", "--log", filepath.Join(dir, "missing")}, 2, ""},
		{[]string{"hami-slice", "--uuid", "GPU-1"}, 2, ""},
	} {
		var out, errOut bytes.Buffer
		code := dispatch(tc.args, &out, &errOut)
		if code != tc.code || !strings.Contains(out.String(), tc.out) {
			t.Errorf("%v: exit %d, %q (stderr %q); want exit %d with %q", tc.args, code, out.String(), errOut.String(), tc.code, tc.out)
		}
	}
}
