package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// spinLog is a spin.cu run from start for ms at rate kernels per second,
// reporting every 100 ms; inside a stall it completes nothing and reports
// nothing (a blocked or frozen process).
func spinLog(start, ms int64, rate float64, stalls ...[2]int64) string {
	var pts []point
	var k float64
	for t := start; t <= start+ms; t += 100 {
		stalled := false
		for _, s := range stalls {
			stalled = stalled || (t > s[0] && t <= s[1])
		}
		if stalled {
			continue
		}
		if t > start {
			k += rate / 10
		}
		pts = append(pts, point{t, int64(k)})
	}
	return "spin pid=1 iters=1\n" + progressText(pts...)
}

func TestJudgeMemcap(t *testing.T) {
	const capBytes = 4 << 30
	for _, tc := range []struct {
		name   string
		log    string
		capped bool
		pass   bool
	}{
		{"capped as it should be", "memcap pid=1 total_bytes=4294967296 free_bytes=4000000000\nalloc bytes=3221225472 result=ok\nalloc bytes=5368709120 result=cudaErrorMemoryAllocation\n", true, true},
		{"the whole card", "memcap pid=1 total_bytes=85520809984 free_bytes=85000000000\nalloc bytes=3221225472 result=ok\nalloc bytes=5368709120 result=ok\n", true, false},
		{"total capped but 5 GiB allocated", "memcap pid=1 total_bytes=4294967296 free_bytes=4000000000\nalloc bytes=3221225472 result=ok\nalloc bytes=5368709120 result=ok\n", true, false},
		{"3 GiB refused", "memcap pid=1 total_bytes=4294967296 free_bytes=4000000000\nalloc bytes=3221225472 result=cudaErrorMemoryAllocation\nalloc bytes=5368709120 result=cudaErrorMemoryAllocation\n", true, false},
		{"uncapped as it should be", "memcap pid=1 total_bytes=85520809984 free_bytes=85000000000\nalloc bytes=3221225472 result=ok\nalloc bytes=5368709120 result=ok\n", false, true},
		{"capped where the pod's value should win", "memcap pid=1 total_bytes=4294967296 free_bytes=4000000000\nalloc bytes=3221225472 result=ok\nalloc bytes=5368709120 result=cudaErrorMemoryAllocation\n", false, false},
		{"died before printing", "", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := parseRecords(strings.NewReader(tc.log), "memcap", "alloc")
			if err != nil {
				t.Fatal(err)
			}
			v, err := judgeMemcap(recs, capBytes, tc.capped)
			if err != nil {
				t.Fatal(err)
			}
			if !v.decided || v.pass != tc.pass {
				t.Errorf("%v, want pass=%v", v, tc.pass)
			}
		})
	}
}

func TestJudgeCompute(t *testing.T) {
	dir := t.TempDir()
	full := writeFile(t, dir, "full", spinLog(10_000, 8000, 500))
	for _, tc := range []struct {
		name      string
		rate      float64
		want, tol float64
		pass      bool
	}{
		{"30 % as capped", 150, 0.30, 0.15, true},
		{"uncapped under a cap", 480, 0.30, 0.15, false},
		{"throttled too hard", 40, 0.30, 0.15, false},
		{"uncapped as expected", 490, 1.0, 0.25, true},
		{"capped where uncapped was expected", 150, 1.0, 0.25, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			test := writeFile(t, dir, "test", spinLog(30_000, 11_000, tc.rate))
			v, err := judgeCompute(full, test, tc.want, tc.tol, 3000)
			if err != nil {
				t.Fatal(err)
			}
			if v.pass != tc.pass {
				t.Errorf("%v, want pass=%v", v, tc.pass)
			}
		})
	}
	short := writeFile(t, dir, "short", spinLog(0, 2000, 100))
	if _, err := judgeCompute(full, short, 0.3, 0.15, 3000); err == nil {
		t.Error("a run shorter than the part left out was judged")
	}
}

func TestJudgeBlock(t *testing.T) {
	dir := t.TempDir()
	block := writeFile(t, dir, "block", "block blocked_ms=13000 released_ms=17000 polls=40 overwritten=0 ended_by_signal=false\n")
	for _, tc := range []struct {
		name  string
		log   string
		pass  bool
		inErr string
	}{
		// The library stops at its next launch and re-checks once a second.
		{"stops and resumes", spinLog(10_000, 14_000, 150, [2]int64{13_300, 17_900}), true, ""},
		{"never stops", spinLog(10_000, 14_000, 150), false, "went on"},
		{"never resumes", spinLog(10_000, 14_000, 150, [2]int64{13_300, 24_500}), false, "did not resume"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := writeFile(t, dir, "spin", tc.log)
			var out bytes.Buffer
			v, err := judgeBlock(log, block, 1500, &out)
			if err != nil {
				t.Fatal(err)
			}
			if v.pass != tc.pass || !strings.Contains(v.why, tc.inErr) {
				t.Errorf("%v, want pass=%v mentioning %q", v, tc.pass, tc.inErr)
			}
			if tc.pass && !strings.Contains(out.String(), "rates kernels_per_s before=") {
				t.Errorf("no rates line: %q", out.String())
			}
		})
	}
	none := writeFile(t, dir, "none", "verdict FAIL no region to block\n")
	if _, err := judgeBlock(writeFile(t, dir, "s", spinLog(0, 5000, 1)), none, 1500, &bytes.Buffer{}); err == nil {
		t.Error("a block that never started was judged")
	}
}

func online(start, end int64, p99 float64) string {
	return fmt.Sprintf("online pid=9 n=7000 p50_us=11.5 p99_us=%.1f max_us=300.0 mean_us=14.0 start_ms=%d end_ms=%d\n", p99, start, end)
}

func TestJudgeColocation(t *testing.T) {
	scenario := func(dir, name string, offlineRate float64, stalls ...[2]int64) {
		writeFile(t, dir, "online-"+name+".txt", online(12_000, 16_000, 900))
		writeFile(t, dir, "offline-"+name+".txt", spinLog(9_000, 9000, offlineRate, stalls...))
	}
	t.Run("suspensions hold", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "online-alone.txt", online(1000, 5000, 20))
		scenario(dir, "uncontrolled", 480)
		scenario(dir, "capped", 150)
		scenario(dir, "interception", 150, [2]int64{10_500, 17_000})
		scenario(dir, "freezer", 480, [2]int64{11_000, 16_500})
		var out bytes.Buffer
		v, err := judgeColocation(dir, &out)
		if err != nil {
			t.Fatal(err)
		}
		if !v.pass || strings.Contains(v.why, "not run") {
			t.Errorf("%v\n%s", v, out.String())
		}
		for _, want := range []string{"| alone: the online process alone | 7000 | 11.5 | 20.0 |", "| interception:", "| yes |"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("table lacks %q:\n%s", want, out.String())
			}
		}
	})
	t.Run("interception did not hold, freezer not run", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "online-alone.txt", online(1000, 5000, 20))
		scenario(dir, "uncontrolled", 480)
		scenario(dir, "interception", 150)
		v, err := judgeColocation(dir, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if v.pass || !strings.Contains(v.why, "interception") {
			t.Errorf("%v, want a failure naming interception", v)
		}
	})
	t.Run("freezer not run, the rest holds", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "online-alone.txt", online(1000, 5000, 20))
		scenario(dir, "uncontrolled", 480)
		scenario(dir, "interception", 150, [2]int64{10_500, 17_000})
		v, err := judgeColocation(dir, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if !v.pass || !strings.Contains(v.why, "freezer (not run)") {
			t.Errorf("%v, want a pass naming what did not run", v)
		}
	})
	t.Run("no baseline", func(t *testing.T) {
		v, err := judgeColocation(t.TempDir(), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if v.pass {
			t.Errorf("%v, want a failure", v)
		}
	})
}
