package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// The thresholds of the verdicts, in one place (docs/real-card.md repeats them).
const (
	// blockedMaxShare: a blocked or frozen process completes at most this
	// share of the kernels it completed before (its launches stop; a
	// kernel already on the card finishes).
	blockedMaxShare = 0.05
	// resumedMinShare: once released it gets back at least this share.
	resumedMinShare = 0.5
	// suspendedMaxShare: an offline process suspended beside a busy online
	// one completes at most this share of what it completed uncontrolled.
	suspendedMaxShare = 0.10
)

func runJudge(args []string, stdout io.Writer) (verdict, error) {
	if len(args) == 0 {
		return verdict{}, fmt.Errorf("%w: judge memcap|compute|block|colocation [flags]", errUsage)
	}
	fs := flag.NewFlagSet("judge "+args[0], flag.ContinueOnError)
	fs.SetOutput(stdout)
	switch args[0] {
	case "memcap":
		log := fs.String("log", "", "memcap.cu's output")
		capGiB := fs.Int64("cap-gib", 4, "the slice's memory")
		want := fs.String("want", "capped", "capped (the slice holds) or uncapped (the library was told otherwise)")
		if err := fs.Parse(args[1:]); err != nil {
			return verdict{}, err
		}
		recs, err := readRecords(*log, "memcap", "alloc")
		if err != nil {
			return verdict{}, err
		}
		return judgeMemcap(recs, *capGiB<<30, *want == "capped")
	case "compute":
		full := fs.String("full", "", "spin.cu's output without the library (the card's 100 %)")
		test := fs.String("test", "", "spin.cu's output under the slice")
		want := fs.Float64("want-ratio", 0.30, "the expected share of the full rate")
		tol := fs.Float64("tolerance", 0.15, "how far the share may lie from --want-ratio")
		skip := fs.Int64("skip-ms", 2000, "the start of each run left out (context creation, the library's sampling settling)")
		if err := fs.Parse(args[1:]); err != nil {
			return verdict{}, err
		}
		return judgeCompute(*full, *test, *want, *tol, *skip)
	case "block":
		log := fs.String("log", "", "spin.cu's output")
		blockLog := fs.String("block-log", "", "qgpu-gpucheck block's output")
		grace := fs.Int64("grace-ms", 1500, "time the library may take to see a block or a release (it re-checks once a second)")
		if err := fs.Parse(args[1:]); err != nil {
			return verdict{}, err
		}
		return judgeBlock(*log, *blockLog, *grace, stdout)
	case "colocation":
		dir := fs.String("dir", "", "directory of online-<scenario>.txt and offline-<scenario>.txt")
		if err := fs.Parse(args[1:]); err != nil {
			return verdict{}, err
		}
		return judgeColocation(*dir, stdout)
	}
	return verdict{}, fmt.Errorf("%w: unknown judge %q", errUsage, args[0])
}

// judgeMemcap: under a cap, cudaMemGetInfo's total is at most the cap, an
// allocation below it succeeds and one above it fails; uncapped, the total
// is more than the cap and every allocation succeeds.
func judgeMemcap(recs []record, capBytes int64, capped bool) (verdict, error) {
	var total int64 = -1
	var allocs []record
	for _, r := range recs {
		switch r.kind {
		case "memcap":
			t, err := r.int("total_bytes")
			if err != nil {
				return verdict{}, err
			}
			total = t
		case "alloc":
			allocs = append(allocs, r)
		}
	}
	if total < 0 || len(allocs) == 0 {
		return fail("memcap printed no total or no allocation (it failed before: see its log)"), nil
	}
	var seen []string
	for _, a := range allocs {
		n, err := a.int("bytes")
		if err != nil {
			return verdict{}, err
		}
		ok := a.fields["result"] == "ok"
		seen = append(seen, fmt.Sprintf("%.1f GiB %s", float64(n)/(1<<30), a.fields["result"]))
		if capped && n < capBytes && !ok {
			return fail("%.1f GiB, under the %d GiB cap, was refused: %s", float64(n)/(1<<30), capBytes>>30, a.fields["result"]), nil
		}
		if capped && n > capBytes && ok {
			return fail("%.1f GiB, over the %d GiB cap, was allocated (total %d MiB)", float64(n)/(1<<30), capBytes>>30, total>>20), nil
		}
		if !capped && !ok {
			return fail("uncapped, but %.1f GiB was refused: %s", float64(n)/(1<<30), a.fields["result"]), nil
		}
	}
	switch {
	case capped && total > capBytes:
		return fail("cudaMemGetInfo total %d MiB, more than the %d MiB cap", total>>20, capBytes>>20), nil
	case !capped && total <= capBytes:
		return fail("uncapped, but cudaMemGetInfo total is %d MiB, within the %d MiB cap", total>>20, capBytes>>20), nil
	}
	return pass("total %d MiB; %s", total>>20, strings.Join(seen, ", ")), nil
}

// spinRate is a spin.cu run's kernels per second, its first skip
// milliseconds left out.
func spinRate(path string, skip int64) (float64, error) {
	recs, err := readRecords(path, "progress")
	if err != nil {
		return 0, err
	}
	pts, err := progressOf(recs)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	from, to := pts[0].tMs+skip, pts[len(pts)-1].tMs
	if from >= to {
		return 0, fmt.Errorf("%s: the run lasted %d ms, not more than the %d ms left out", path, to-pts[0].tMs, skip)
	}
	return rate(pts, from, to)
}

func judgeCompute(full, test string, want, tol float64, skip int64) (verdict, error) {
	f, err := spinRate(full, skip)
	if err != nil {
		return verdict{}, err
	}
	t, err := spinRate(test, skip)
	if err != nil {
		return verdict{}, err
	}
	if f <= 0 {
		return fail("the run without the library completed no kernel"), nil
	}
	ratio := t / f
	msg := fmt.Sprintf("%.1f kernels/s against %.1f at 100 %%: ratio %.2f (want %.2f ± %.2f)", t, f, ratio, want, tol)
	if math.Abs(ratio-want) > tol {
		return fail("%s", msg), nil
	}
	return pass("%s", msg), nil
}

// blockWindow is what `qgpu-gpucheck block` printed: when the block was
// written and when it was lifted.
func blockWindow(path string) (blocked, released int64, err error) {
	recs, err := readRecords(path, "block")
	if err != nil {
		return 0, 0, err
	}
	if len(recs) != 1 {
		return 0, 0, fmt.Errorf("%s: %d block lines, want 1 (did the block start?)", path, len(recs))
	}
	if blocked, err = recs[0].int("blocked_ms"); err != nil {
		return 0, 0, err
	}
	released, err = recs[0].int("released_ms")
	return blocked, released, err
}

func judgeBlock(log, blockLog string, grace int64, stdout io.Writer) (verdict, error) {
	recs, err := readRecords(log, "progress")
	if err != nil {
		return verdict{}, err
	}
	pts, err := progressOf(recs)
	if err != nil {
		return verdict{}, fmt.Errorf("%s: %w", log, err)
	}
	blocked, released, err := blockWindow(blockLog)
	if err != nil {
		return verdict{}, err
	}
	if last := pts[len(pts)-1].tMs; last < released+grace {
		return fail("no report since %d ms before the release: launches did not resume (or the run ended too soon)", released-last), nil
	}
	before, err := rate(pts, pts[0].tMs+1000, blocked)
	if err != nil {
		return verdict{}, fmt.Errorf("before the block: %w", err)
	}
	during, err := rate(pts, blocked+grace, released)
	if err != nil {
		return verdict{}, fmt.Errorf("during the block: %w", err)
	}
	after, err := rate(pts, released+grace, pts[len(pts)-1].tMs)
	if err != nil {
		return verdict{}, fmt.Errorf("after the block: %w", err)
	}
	fmt.Fprintf(stdout, "rates kernels_per_s before=%.1f during=%.1f after=%.1f (grace %d ms)\n", before, during, after, grace)
	msg := fmt.Sprintf("%.1f kernels/s before, %.1f blocked, %.1f released", before, during, after)
	switch {
	case before <= 0:
		return fail("no kernel completed before the block: %s", msg), nil
	case during > blockedMaxShare*before:
		return fail("launches went on through the block (more than %.0f %% of before): %s", 100*blockedMaxShare, msg), nil
	case after < resumedMinShare*before:
		return fail("launches did not resume (less than %.0f %% of before): %s", 100*resumedMinShare, msg), nil
	}
	return pass("%s", msg), nil
}

// The colocation scenarios, in the order run.sh runs them.
var scenarios = []struct{ name, what string }{
	{"alone", "the online process alone"},
	{"uncontrolled", "beside the offline process, nothing done"},
	{"capped", "beside the offline process under its hami-core slice (30 %), not suspended"},
	{"interception", "the offline process blocked through its HAMi-core region"},
	{"freezer", "the offline process frozen through its cgroup"},
}

type colocationRow struct {
	name, what         string
	ran                bool
	p50, p99, max      float64
	n                  int64
	offline            float64 // kernels/s over the online run; NaN without an offline process
	err                string
	suspended, checked bool
}

func judgeColocation(dir string, stdout io.Writer) (verdict, error) {
	rows := make([]colocationRow, len(scenarios))
	for i, sc := range scenarios {
		rows[i] = readScenario(dir, sc.name, sc.what)
	}
	uncontrolled := rows[1]
	var problems []string
	for i := range rows {
		r := &rows[i]
		if r.name != "interception" && r.name != "freezer" || !r.ran {
			continue
		}
		r.checked = true
		if !uncontrolled.ran || math.IsNaN(uncontrolled.offline) || uncontrolled.offline <= 0 {
			r.checked = false
			continue
		}
		r.suspended = r.offline <= suspendedMaxShare*uncontrolled.offline
		if !r.suspended {
			problems = append(problems, fmt.Sprintf("%s: offline still ran at %.1f kernels/s (uncontrolled %.1f)", r.name, r.offline, uncontrolled.offline))
		}
	}
	writeColocationTable(stdout, rows, uncontrolled)
	var missing []string
	for _, r := range rows {
		if !r.ran {
			missing = append(missing, r.name+" ("+r.err+")")
		}
	}
	switch {
	case !rows[0].ran || !uncontrolled.ran:
		return fail("no baseline: %s", strings.Join(missing, "; ")), nil
	case len(problems) > 0:
		return fail("%s", strings.Join(problems, "; ")), nil
	case len(missing) > 0:
		return pass("every suspension that ran held the offline process under %.0f %% of its uncontrolled rate; not run: %s", 100*suspendedMaxShare, strings.Join(missing, "; ")), nil
	}
	return pass("every suspension held the offline process under %.0f %% of its uncontrolled rate", 100*suspendedMaxShare), nil
}

func readScenario(dir, name, what string) colocationRow {
	row := colocationRow{name: name, what: what, offline: math.NaN()}
	recs, err := readRecords(filepath.Join(dir, "online-"+name+".txt"), "online")
	if errors.Is(err, os.ErrNotExist) {
		row.err = "not run"
		return row
	}
	if err == nil && len(recs) != 1 {
		err = fmt.Errorf("%d online lines, want 1", len(recs))
	}
	var start, end int64
	if err == nil {
		r := recs[0]
		for _, f := range []struct {
			key string
			dst *float64
		}{{"p50_us", &row.p50}, {"p99_us", &row.p99}, {"max_us", &row.max}} {
			if *f.dst, err = r.float(f.key); err != nil {
				break
			}
		}
		if err == nil {
			row.n, err = r.int("n")
		}
		if err == nil {
			start, err = r.int("start_ms")
		}
		if err == nil {
			end, err = r.int("end_ms")
		}
	}
	if err != nil {
		row.err = err.Error()
		return row
	}
	row.ran = true
	if name == "alone" {
		return row
	}
	off, err := readRecords(filepath.Join(dir, "offline-"+name+".txt"), "progress")
	var pts []point
	if err == nil {
		pts, err = progressOf(off)
	}
	if err == nil {
		row.offline, err = rate(pts, start, end)
	}
	if err != nil {
		row.ran, row.err = false, "offline: "+err.Error()
	}
	return row
}

func writeColocationTable(w io.Writer, rows []colocationRow, uncontrolled colocationRow) {
	fmt.Fprintln(w, "| scenario | online launches | p50 µs | p99 µs | max µs | offline kernels/s | suspended |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		if !r.ran {
			fmt.Fprintf(w, "| %s: %s | %s | | | | | |\n", r.name, r.what, r.err)
			continue
		}
		off, susp := "–", "–"
		if !math.IsNaN(r.offline) {
			off = fmt.Sprintf("%.1f", r.offline)
			if uncontrolled.ran && uncontrolled.offline > 0 && r.name != "uncontrolled" {
				off += fmt.Sprintf(" (%.0f %%)", 100*r.offline/uncontrolled.offline)
			}
		}
		if r.checked {
			susp = "no"
			if r.suspended {
				susp = "yes"
			}
		}
		fmt.Fprintf(w, "| %s: %s | %d | %.1f | %.1f | %.1f | %s | %s |\n", r.name, r.what, r.n, r.p50, r.p99, r.max, off, susp)
	}
}
