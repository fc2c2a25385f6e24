package perf

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
	"github.com/qgpu-scheduler/qgpu/test/tracepods"
)

// render is scheduler_perf's template evaluation (create.go,
// getSpecFromTextTemplateFile): text/template with div and mod over
// Index and Count, then strict YAML.
func render(t *testing.T, path string, index, count int, into any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.New("object").Funcs(template.FuncMap{
		"div": func(a, b int) int { return a / b }, "mod": func(a, b int) int { return a % b },
	}).Parse(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, map[string]any{"Index": index, "Count": count}); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(out.Bytes(), into); err != nil {
		t.Fatalf("index %d: %v\n%s", index, err, out.String())
	}
}

func TestWorkloadTemplates(t *testing.T) {
	trace := tracepods.Generated()
	w, err := NewWorkload(trace, 200, DefaultSizing)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Nodes) != 200 || len(w.Fill) == 0 || len(w.Measured) == 0 {
		t.Fatalf("nodes %d fill %d measured %d", len(w.Nodes), len(w.Fill), len(w.Measured))
	}
	// Sizing: the stock case's whole cards reach the targets (within one
	// pod's card), the qGPU shares stay at or below them.
	cards := float64(w.Cards)
	if f := float64(w.FillWhole) / cards; f < DefaultSizing.Fill || f > DefaultSizing.Fill+1/cards {
		t.Errorf("fill %.3f of the cards whole, want %.2f", f, DefaultSizing.Fill)
	}
	total := DefaultSizing.Fill + DefaultSizing.Measure
	if m := float64(w.FillWhole+w.MeasuredWhole) / cards; m < total || m > total+1/cards {
		t.Errorf("fill+measured %.3f of the cards whole, want %.2f", m, total)
	}
	if s := float64(w.FillMilli+w.MeasuredMilli) / 1000 / cards; s > total {
		t.Errorf("qGPU shares %.3f of the cards, above the whole cards' %.2f", s, total)
	}
	for _, p := range append(append([]sim.Pod{}, w.Fill...), w.Measured...) {
		if p.NumGPU > 1 {
			t.Fatalf("pod %s asks for %d cards", p.Name, p.NumGPU)
		}
	}

	dir := t.TempDir()
	profile, err := os.ReadFile("../../../config/qgpu-scheduler.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files, err := w.WriteFiles(dir, profile, "Noop")
	if err != nil {
		t.Fatal(err)
	}
	// Every node and pod the templates give is the one the workload holds.
	for i := range w.Nodes {
		var q, s v1.Node
		render(t, files.Templates["qgpu-node"], i, len(w.Nodes), &q)
		render(t, files.Templates["stock-node"], i, len(w.Nodes), &s)
		if q.Annotations[protocol.AnnotationInventory] == "" || q.GenerateName == "" {
			t.Fatalf("qgpu node %d: %v", i, q.ObjectMeta)
		}
		wantCores := int64(w.Nodes[i].GPUs * protocol.CoresPerCard)
		if got := q.Status.Allocatable[protocol.ResourceCore]; got.Value() != wantCores {
			t.Fatalf("qgpu node %d: %s cores, want %d", i, got.String(), wantCores)
		}
		if got := s.Status.Allocatable[stockGPU]; got.Value() != int64(w.Nodes[i].GPUs) || s.Labels[modelLabel] != w.Nodes[i].Model {
			t.Fatalf("stock node %d: %s cards, model %q; want %d %s", i, got.String(), s.Labels[modelLabel], w.Nodes[i].GPUs, w.Nodes[i].Model)
		}
		if _, ok := s.Status.Allocatable[protocol.ResourceCore]; ok || len(s.Annotations) > 0 {
			t.Fatalf("stock node %d has qGPU's resources or annotations", i)
		}
	}
	for i := range w.Measured {
		var q, s v1.Pod
		render(t, files.Templates["qgpu-measured"], i, len(w.Measured), &q)
		render(t, files.Templates["stock-measured"], i, len(w.Measured), &s)
		p := &w.Measured[i]
		want := w.qgpuPod(p)
		if !equalJSON(t, &q, want) {
			t.Fatalf("qgpu pod %d differs from the trace's", i)
		}
		if q.Spec.SchedulerName != protocol.SchedulerName || s.Spec.SchedulerName != "" {
			t.Fatalf("pod %d schedulers %q %q", i, q.Spec.SchedulerName, s.Spec.SchedulerName)
		}
		got := s.Spec.Containers[0].Resources.Requests[stockGPU]
		if got.Value() != int64(p.NumGPU) {
			t.Fatalf("stock pod %d: %s cards, want %d", i, got.String(), p.NumGPU)
		}
		if (len(p.Models) > 0) != (s.Spec.Affinity != nil) {
			t.Fatalf("stock pod %d: models %v, affinity %v", i, p.Models, s.Spec.Affinity)
		}
	}
	var f v1.Pod
	render(t, files.Templates["qgpu-fill"], 0, len(w.Fill), &f)
	if !equalJSON(t, &f, w.qgpuPod(&w.Fill[0])) {
		t.Fatal("fill pod 0 differs from the trace's")
	}

	noop, err := os.ReadFile(files.NoopProfile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(noop), "name: QGPU\n") || !strings.Contains(string(noop), "name: Noop") ||
		strings.Contains(string(noop), "nodePolicy") || !strings.Contains(string(noop), "percentageOfNodesToScore: 100") {
		t.Fatalf("no-op profile:\n%s", noop)
	}
	for r := range 3 {
		cfg, err := files.RunConfig(r, w, "/qgpu.yaml", metricsConfig())
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(cfg)
		var cases []map[string]any
		if err := yaml.Unmarshal(raw, &cases); err != nil {
			t.Fatal(err)
		}
		if len(cases) != 3 || cases[0]["name"] != Order(r)[0] || cases[0]["metricsCollectorConfig"] == nil {
			t.Fatalf("run %d: cases %v", r, cases)
		}
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

func TestTemplateManyShapes(t *testing.T) {
	var objs []any
	for i := range 300 {
		objs = append(objs, map[string]int{"n": i % 170})
	}
	path := t.TempDir() + "/t.yaml"
	s, err := Template(objs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		var got map[string]int
		render(t, path, i, 300, &got)
		if got["n"] != i%170 {
			t.Fatalf("index %d: %v", i, got)
		}
	}
}

func TestCaseOf(t *testing.T) {
	for name, want := range map[string]string{
		"BenchmarkPerf/qgpu/500Nodes/measured":     CaseQGPU,
		"BenchmarkPerf/noop#01/500Nodes/measured":  CaseNoop,
		"BenchmarkPerf#02/stock#03/5000Nodes/init": CaseStock,
		"BenchmarkPerf/other/500Nodes/measured":    "",
	} {
		if got := caseOf(name); got != want {
			t.Errorf("caseOf(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestTraceWorkload sizes the openb trace's workload where QGPU_TRACES
// holds it (make bench-perf's), and logs it.
func TestTraceWorkload(t *testing.T) {
	dir := os.Getenv("QGPU_TRACES")
	if _, err := os.Stat(filepath.Join(dir, "openb_pod_list_default.csv")); dir == "" || err != nil {
		t.Skip("QGPU_TRACES holds no openb trace")
	}
	trace, err := tracepods.Read(dir, "openb_pod_list_default.csv")
	if err != nil {
		t.Fatal(err)
	}
	for _, nodes := range []int{500, 5000} {
		w, err := NewWorkload(trace, nodes, DefaultSizing)
		if err != nil {
			t.Fatal(err)
		}
		if w.SkippedMultiCard == 0 || len(w.Measured) < nodes {
			t.Errorf("%d nodes: %s", nodes, w.Describe())
		}
		for _, p := range append(append([]sim.Pod{}, w.Fill...), w.Measured...) {
			if len(p.Models) > 0 {
				t.Fatalf("pod %s keeps its model filter %v", p.Name, p.Models)
			}
		}
		t.Log(w.Describe())
	}
}
