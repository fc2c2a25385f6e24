package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

type stat struct{ mean, sd float64 }

// summarize is the mean and sample standard deviation over seeds at pct.
func summarize(rs []sim.Result, pct int) stat {
	return summarizeBy(rs, func(r sim.Result) float64 { return r.Alloc[pct] })
}

// merit is a replay's figure of merit: the allocation at 130 % arrived,
// or with churn the time-average allocation in steady state.
func merit(r sim.Result) float64 {
	if r.Steady != nil {
		return r.Steady.Alloc
	}
	return r.Alloc[130]
}

// summarizeBy is the mean and sample standard deviation of v over seeds.
func summarizeBy(rs []sim.Result, v func(sim.Result) float64) stat {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = v(r)
	}
	return meanSD(vs)
}

// meanSD is the mean and sample standard deviation of vs.
func meanSD(vs []float64) stat {
	var sum float64
	for _, v := range vs {
		sum += v
	}
	mean := sum / float64(len(vs))
	var ss float64
	for _, v := range vs {
		ss += (v - mean) * (v - mean)
	}
	sd := 0.0
	if len(vs) > 1 {
		sd = math.Sqrt(ss / float64(len(vs)-1))
	}
	return stat{mean, sd}
}

// reportCurve prints the paper protocol's table and its last line, and
// writes its CSV and plot under out.
func reportCurve(base sim.Config, policies []placement.Policy, seeds []int64, results map[placement.Policy][]sim.Result, out, title string) error {
	printTable(os.Stdout, base, policies, seeds, results)
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if err := writeCSV(filepath.Join(out, "replay-"+string(base.Mode)+".csv"), policies, seeds, results); err != nil {
			return err
		}
		if err := writePlot(filepath.Join(out, "replay-"+string(base.Mode)+".png"), title, policies, results); err != nil {
			return err
		}
	}
	last := summarize(results[policies[len(policies)-1]], 130)
	fmt.Printf("allocation@130 mean %.2f sd %.2f\n", last.mean, last.sd)
	return nil
}

func printTable(w io.Writer, base sim.Config, policies []placement.Policy, seeds []int64, results map[placement.Policy][]sim.Result) {
	fmt.Fprintf(w, "mode %s, %d seeds (%d..%d): GPU allocation %% (mean ± sd) at arrived GPU demand %% of capacity\n",
		base.Mode, len(seeds), seeds[0], seeds[len(seeds)-1])
	describeStudy(w, base)
	classes := base.Classes.SharedPct > 0
	if classes {
		fmt.Fprintf(w, "%d%% of the nodes mixed, %d%% of the pods taking part of a card online or offline; general pods %s\n",
			base.Classes.MixedPct, base.Classes.SharedPct, map[bool]string{true: "treat mixed nodes alike", false: "keep off mixed nodes"}[base.Classes.MixedAlike])
	}
	fmt.Fprintf(w, "%-10s", "policy")
	for _, c := range checkpoints {
		fmt.Fprintf(w, " %15s", fmt.Sprintf("@%d", c))
	}
	fmt.Fprintf(w, " %10s", "failed@130")
	if classes {
		fmt.Fprintf(w, " %12s", "class-failed")
	}
	fmt.Fprintln(w)
	for _, p := range policies {
		fmt.Fprintf(w, "%-10s", p)
		for _, c := range checkpoints {
			s := summarize(results[p], c)
			fmt.Fprintf(w, " %15s", fmt.Sprintf("%.2f ± %.2f", s.mean, s.sd))
		}
		var failed, classFailed int
		for _, r := range results[p] {
			failed += r.Failed
			classFailed += r.ClassFailed
		}
		n := float64(len(results[p]))
		fmt.Fprintf(w, " %10.1f", float64(failed)/n)
		if classes {
			fmt.Fprintf(w, " %12.1f", float64(classFailed)/n)
		}
		fmt.Fprintln(w)
	}
}

// writeCSV writes one row per policy, seed and arrival percentage, and the
// mean and sd over seeds as seed "mean" and "sd".
func writeCSV(path string, policies []placement.Policy, seeds []int64, results map[placement.Policy][]sim.Result) error {
	return writeRows(path, []string{"policy", "seed", "arrival_pct", "allocation_pct"}, func(w *csv.Writer) {
		for _, p := range policies {
			rs := results[p]
			for pct := 1; pct < len(rs[0].Alloc); pct++ {
				for i, r := range rs {
					_ = w.Write([]string{string(p), strconv.FormatInt(seeds[i], 10), strconv.Itoa(pct), ff(r.Alloc[pct])})
				}
				s := summarize(rs, pct)
				_ = w.Write([]string{string(p), "mean", strconv.Itoa(pct), ff(s.mean)})
				_ = w.Write([]string{string(p), "sd", strconv.Itoa(pct), ff(s.sd)})
			}
		}
	})
}

// writeRows writes a CSV file of header and the rows rows writes; a
// write error surfaces at the flush.
func writeRows(path string, header []string, rows func(w *csv.Writer)) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(header)
	rows(w)
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func ff(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
