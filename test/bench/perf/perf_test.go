package perf

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/qgpu-scheduler/qgpu/test/tracepods"
)

var (
	flagNodes   = flag.String("perf-nodes", "500", "comma-separated cluster sizes (nodes sampled from the trace's node list)")
	flagRuns    = flag.Int("perf-runs", 3, "runs per size; each runs the three cases, each in a fresh etcd, apiserver and scheduler")
	flagProfile = flag.String("perf-profile", "../../../config/qgpu-scheduler.yaml", "the QGPU profile")
	flagPods    = flag.String("perf-pods", "openb_pod_list_default.csv", "the trace's pod list in $QGPU_TRACES")
	flagFill    = flag.Float64("perf-fill", DefaultSizing.Fill, "init pods' share of the cards (whole, as the stock case takes them)")
	flagMeasure = flag.Float64("perf-measure", DefaultSizing.Measure, "measured pods' share of the cards after the init pods")
	flagOut     = flag.String("perf-out", "", "directory for scheduler_perf's JSON results and the generated templates (default: a temporary one)")
)

func TestMain(m *testing.M) {
	if err := initScheduler(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// BenchmarkPerf runs scheduler_perf on the trace's shapes (workload.go) for
// each -perf-nodes size, -perf-runs times, and prints each run's
// SchedulingThroughput per case, the ratios qgpu/no-op and qgpu/stock of
// that run, and their medians; then the per-extension-point latencies.
// Run with -benchtime=1ns (scheduler_perf's workloads run once; make
// bench-perf does).
func BenchmarkPerf(b *testing.B) {
	if _, err := exec.LookPath("etcd"); err != nil {
		b.Fatalf("scheduler_perf starts an etcd binary from PATH: %v (make bench-perf builds one into _output/bin)", err)
	}
	trace := tracepods.Generated()
	if dir := os.Getenv("QGPU_TRACES"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, *flagPods)); err == nil {
			if trace, err = tracepods.Read(dir, *flagPods); err != nil {
				b.Fatal(err)
			}
		}
	}
	if trace.Source == "generated" {
		if os.Getenv("QGPU_TRACES_REQUIRED") == "1" {
			b.Fatal("QGPU_TRACES holds no openb trace")
		}
		fmt.Println("bench-perf: QGPU_TRACES holds no openb trace; using tracepods.Generated's stand-in shapes")
	}
	profile, err := filepath.Abs(*flagProfile)
	if err != nil {
		b.Fatal(err)
	}
	qgpuProfile, err := os.ReadFile(profile)
	if err != nil {
		b.Fatal(err)
	}
	out := *flagOut
	if out == "" {
		out = b.TempDir()
	}
	for _, size := range strings.Split(*flagNodes, ",") {
		nodes, err := strconv.Atoi(strings.TrimSpace(size))
		if err != nil {
			b.Fatalf("-perf-nodes: %v", err)
		}
		w, err := NewWorkload(trace, nodes, Sizing{Fill: *flagFill, Measure: *flagMeasure})
		if err != nil {
			b.Fatal(err)
		}
		dir := filepath.Join(out, fmt.Sprintf("%dnodes", nodes))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		files, err := w.WriteFiles(dir, qgpuProfile, NoopName)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Printf("bench-perf %d nodes: %s\n", nodes, w.Describe())
		var runs []runResult
		for r := range *flagRuns {
			cfg, err := files.RunConfig(r, w, profile, metricsConfig())
			if err != nil {
				b.Fatal(err)
			}
			items := filepath.Join(dir, fmt.Sprintf("run-%d", r))
			if err := setDataItemsDir(items); err != nil {
				b.Fatal(err)
			}
			runPerf(b, cfg, fmt.Sprintf("%dnodes-run%d", nodes, r))
			if b.Failed() {
				return
			}
			res, err := readRun(items)
			if err != nil {
				b.Fatal(err)
			}
			runs = append(runs, res)
			fmt.Printf("bench-perf %d nodes run %d (%s): %s\n", nodes, r+1, strings.Join(Order(r), ", "), res.line())
		}
		fmt.Print(summary(nodes, runs))
	}
}

// runResult is one run's data items by case.
type runResult map[string][]dataItem

type dataItem struct {
	Data   map[string]float64 `json:"data"`
	Unit   string             `json:"unit"`
	Labels map[string]string  `json:"labels"`
}

// readRun reads the JSON file scheduler_perf wrote into dir and sorts its
// items by case (the test case's name in the item's Name label).
func readRun(dir string) (runResult, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) != 1 {
		return nil, fmt.Errorf("want one scheduler_perf JSON file in %s, got %v (%v)", dir, files, err)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		return nil, err
	}
	var doc struct {
		DataItems []dataItem `json:"dataItems"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", files[0], err)
	}
	res := runResult{}
	for _, it := range doc.DataItems {
		c := caseOf(it.Labels["Name"])
		if c == "" {
			return nil, fmt.Errorf("%s: item of no case: %v", files[0], it.Labels)
		}
		res[c] = append(res[c], it)
	}
	for _, c := range Cases {
		if res.throughput(c) <= 0 {
			return nil, fmt.Errorf("%s: no SchedulingThroughput for %s", files[0], c)
		}
	}
	return res, nil
}

// caseOf finds the case among a Name label's path elements
// ("BenchmarkPerf/qgpu/500Nodes/measured", "#01" suffixes where b.Run
// repeats a name).
func caseOf(name string) string {
	for _, part := range strings.Split(name, "/") {
		part, _, _ = strings.Cut(part, "#")
		for _, c := range Cases {
			if part == c {
				return c
			}
		}
	}
	return ""
}

// throughput is case c's SchedulingThroughput average (pods/s).
func (r runResult) throughput(c string) float64 {
	for _, it := range r[c] {
		if it.Labels["Metric"] == "SchedulingThroughput" {
			return it.Data["Average"]
		}
	}
	return 0
}

// latency is case c's item of metric with the label key=value, if any.
func (r runResult) latency(c, metric string, labels map[string]string) (dataItem, bool) {
	for _, it := range r[c] {
		if it.Labels["Metric"] != metric {
			continue
		}
		match := true
		for k, v := range labels {
			match = match && it.Labels[k] == v
		}
		if match {
			return it, true
		}
	}
	return dataItem{}, false
}

func (r runResult) line() string {
	q, n, s := r.throughput(CaseQGPU), r.throughput(CaseNoop), r.throughput(CaseStock)
	return fmt.Sprintf("SchedulingThroughput qgpu %.1f, no-op %.1f, stock %.1f pods/s; qgpu/no-op %.3f qgpu/stock %.3f", q, n, s, q/n, q/s)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// extensionPoints are the framework's points make bench-perf reports.
var extensionPoints = []string{"PreFilter", "Filter", "PreScore", "Score", "Reserve", "PreBind", "Bind"}

// summary is a size's ratios (median of the runs' own ratios) and the
// median over runs of each extension point's and QGPU's plugin latencies.
func summary(nodes int, runs []runResult) string {
	var sb strings.Builder
	var rn, rs []float64
	for _, r := range runs {
		q := r.throughput(CaseQGPU)
		rn = append(rn, q/r.throughput(CaseNoop))
		rs = append(rs, q/r.throughput(CaseStock))
	}
	fmt.Fprintf(&sb, "bench-perf %d nodes, %d runs: qgpu/no-op %.3f qgpu/stock %.3f (medians of each run's ratios; per run qgpu/no-op %s, qgpu/stock %s)\n",
		nodes, len(runs), median(rn), median(rs), floats(rn), floats(rs))
	for _, c := range Cases {
		var t []float64
		for _, r := range runs {
			t = append(t, r.throughput(c))
		}
		fmt.Fprintf(&sb, "bench-perf %d nodes %s: SchedulingThroughput median %.1f pods/s (runs %s)\n", nodes, c, median(t), floats(t))
	}
	const ep = "scheduler_framework_extension_point_duration_seconds"
	fmt.Fprintf(&sb, "bench-perf %d nodes extension points, ms p50/p99 (median over runs):", nodes)
	for _, point := range extensionPoints {
		fmt.Fprintf(&sb, "\n  %-9s", point)
		for _, c := range Cases {
			fmt.Fprintf(&sb, " %s %s", c, quantiles(runs, c, ep, map[string]string{"extension_point": point}))
		}
	}
	const pe = "scheduler_plugin_execution_duration_seconds"
	fmt.Fprintf(&sb, "\nbench-perf %d nodes plugin execution (sampled cycles), ms p50/p99 (median over runs):", nodes)
	for _, point := range []string{"PreFilter", "Filter", "Score", "ScoreExtensionNormalize", "Reserve", "PreBind", "Bind"} {
		fmt.Fprintf(&sb, "\n  %-23s QGPU %s  QGPUNoop %s", point,
			quantiles(runs, CaseQGPU, pe, map[string]string{"plugin": "QGPU", "extension_point": point}),
			quantiles(runs, CaseNoop, pe, map[string]string{"plugin": NoopName, "extension_point": point}))
	}
	sb.WriteString("\n")
	return sb.String()
}

func quantiles(runs []runResult, c, metric string, labels map[string]string) string {
	var p50, p99 []float64
	for _, r := range runs {
		if it, ok := r.latency(c, metric, labels); ok {
			p50 = append(p50, it.Data["Perc50"])
			p99 = append(p99, it.Data["Perc99"])
		}
	}
	if len(p50) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f/%.3f", median(p50), median(p99))
}

func floats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 3, 64)
	}
	return strings.Join(s, " ")
}
