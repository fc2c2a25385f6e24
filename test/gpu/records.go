package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// record is one line a CUDA program of the payload printed: a kind, then
// key=value fields (`progress t_ms=1764300000123 kernels=42`). The
// programs share stdout with nothing else, but HAMi-core logs to the same
// terminal when run by hand, so lines of other kinds are skipped.
type record struct {
	kind   string
	fields map[string]string
}

func parseRecords(r io.Reader, kinds ...string) ([]record, error) {
	var out []record
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		words := strings.Fields(sc.Text())
		if len(words) == 0 || !slices.Contains(kinds, words[0]) {
			continue
		}
		rec := record{kind: words[0], fields: map[string]string{}}
		for _, w := range words[1:] {
			k, v, ok := strings.Cut(w, "=")
			if !ok {
				return nil, fmt.Errorf("%q: field %q is not key=value", sc.Text(), w)
			}
			rec.fields[k] = v
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}

func readRecords(path string, kinds ...string) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := parseRecords(f, kinds...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}

func (r record) int(key string) (int64, error) {
	v, ok := r.fields[key]
	if !ok {
		return 0, fmt.Errorf("%s line without %s", r.kind, key)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s line: %s=%q is not an integer", r.kind, key, v)
	}
	return n, nil
}

func (r record) float(key string) (float64, error) {
	v, ok := r.fields[key]
	if !ok {
		return 0, fmt.Errorf("%s line without %s", r.kind, key)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%s line: %s=%q is not a number", r.kind, key, v)
	}
	return f, nil
}

// point is a progress report of spin.cu: kernels completed by a wall-clock
// time (milliseconds since the epoch, comparable across processes).
type point struct{ tMs, kernels int64 }

func progressOf(recs []record) ([]point, error) {
	var pts []point
	for _, r := range recs {
		if r.kind != "progress" {
			continue
		}
		t, err := r.int("t_ms")
		if err != nil {
			return nil, err
		}
		k, err := r.int("kernels")
		if err != nil {
			return nil, err
		}
		if n := len(pts); n > 0 && (t < pts[n-1].tMs || k < pts[n-1].kernels) {
			return nil, fmt.Errorf("progress goes back at t_ms=%d", t)
		}
		pts = append(pts, point{t, k})
	}
	if len(pts) < 2 {
		return nil, fmt.Errorf("%d progress lines, need at least 2 (did the program start?)", len(pts))
	}
	return pts, nil
}

// kernelsAt is the count of the last report at or before t: a frozen or
// blocked process reports nothing, and its count stands still meanwhile.
func kernelsAt(pts []point, t int64) (int64, bool) {
	i, found := slices.BinarySearchFunc(pts, t, func(p point, t int64) int {
		switch {
		case p.tMs < t:
			return -1
		case p.tMs > t:
			return 1
		}
		return 0
	})
	if found {
		for i+1 < len(pts) && pts[i+1].tMs == t {
			i++
		}
		return pts[i].kernels, true
	}
	if i == 0 {
		return 0, false
	}
	return pts[i-1].kernels, true
}

// rate is the kernels per second completed between from and to; the window
// must lie within the reports.
func rate(pts []point, from, to int64) (float64, error) {
	if to <= from {
		return 0, fmt.Errorf("empty window [%d, %d]", from, to)
	}
	last := pts[len(pts)-1].tMs
	if to > last {
		return 0, fmt.Errorf("window ends at %d, after the last report (%d)", to, last)
	}
	a, ok := kernelsAt(pts, from)
	if !ok {
		return 0, fmt.Errorf("window starts at %d, before the first report (%d)", from, pts[0].tMs)
	}
	b, _ := kernelsAt(pts, to)
	return float64(b-a) * 1000 / float64(to-from), nil
}
