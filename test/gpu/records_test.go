package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseRecords(t *testing.T) {
	in := `[HAMI-core Msg(1:2:libvgpu.c:836)]: Initializing.....
spin pid=7 sms=132 blocks=528 threads=256 iters=100 kernel_ms=2.000
progress t_ms=1000 kernels=0
progress t_ms=1100 kernels=50

done kernels=50 seconds=1.0
`
	recs, err := parseRecords(strings.NewReader(in), "spin", "progress")
	if err != nil {
		t.Fatal(err)
	}
	want := []record{
		{kind: "spin", fields: map[string]string{"pid": "7", "sms": "132", "blocks": "528", "threads": "256", "iters": "100", "kernel_ms": "2.000"}},
		{kind: "progress", fields: map[string]string{"t_ms": "1000", "kernels": "0"}},
		{kind: "progress", fields: map[string]string{"t_ms": "1100", "kernels": "50"}},
	}
	if diff := cmp.Diff(want, recs, cmp.AllowUnexported(record{})); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if _, err := parseRecords(strings.NewReader("progress t_ms\n"), "progress"); err == nil {
		t.Error("a field without = was accepted")
	}
}

func progressText(pts ...point) string {
	var b strings.Builder
	for _, p := range pts {
		fmt.Fprintf(&b, "progress t_ms=%d kernels=%d\n", p.tMs, p.kernels)
	}
	return b.String()
}

func TestProgressAndRate(t *testing.T) {
	// 100 kernels/s, then stalled from 2000 to 4000 (blocked), then again.
	pts := []point{{1000, 0}, {1500, 50}, {2000, 100}, {4000, 100}, {4500, 150}, {5000, 200}}
	recs, err := parseRecords(strings.NewReader(progressText(pts...)), "progress")
	if err != nil {
		t.Fatal(err)
	}
	got, err := progressOf(recs)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(pts, got, cmp.AllowUnexported(point{})); diff != "" {
		t.Fatalf("progress (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		from, to int64
		want     float64
		err      bool
	}{
		{1000, 2000, 100, false},
		{2000, 4000, 0, false},
		{2100, 3900, 0, false}, // between reports: the count stands
		{1000, 5000, 50, false},
		{1200, 1700, 100, false}, // 0 at 1200 (the report of 1000), 50 at 1700
		{900, 2000, 0, true},     // before the first report
		{4000, 5100, 0, true},    // after the last
		{2000, 2000, 0, true},
	} {
		r, err := rate(got, tc.from, tc.to)
		if (err != nil) != tc.err || (!tc.err && r != tc.want) {
			t.Errorf("rate(%d, %d) = %v, %v; want %v (error %v)", tc.from, tc.to, r, err, tc.want, tc.err)
		}
	}
	for _, bad := range []string{
		"progress t_ms=1000 kernels=0\n",                               // one report
		"progress t_ms=1000 kernels=5\nprogress t_ms=900 kernels=6\n",  // time goes back
		"progress t_ms=1000 kernels=5\nprogress t_ms=1100 kernels=4\n", // count goes back
		"progress t_ms=1000 kernels=5\nprogress t_ms=1100 kernels=x\n", // not a number
		"progress t_ms=1000 kernels=5\nprogress kernels=6\n",           // no time
	} {
		recs, err := parseRecords(strings.NewReader(bad), "progress")
		if err == nil {
			_, err = progressOf(recs)
		}
		if err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
