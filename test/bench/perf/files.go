package perf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

// The workload written as scheduler_perf's files: templates, profiles, the run config.

// Files are the paths WriteFiles wrote.
type Files struct {
	// Config is scheduler_perf's test-case file for run r (RunConfig).
	dir string
	// Templates by name (qgpu-node, stock-node, qgpu-fill, ...).
	Templates map[string]string
	// NoopProfile is the QGPU profile with the no-op plugin in its place.
	NoopProfile string
}

// WriteFiles writes the node and pod templates into dir, and the no-op
// profile made from qgpuProfile (config/qgpu-scheduler.yaml's bytes) with
// noopName in QGPU's place.
func (w *Workload) WriteFiles(dir string, qgpuProfile []byte, noopName string) (*Files, error) {
	f := &Files{dir: dir, Templates: map[string]string{}}
	nodes := func(conv func(*sim.Node) (*v1.Node, error)) ([]any, error) {
		out := make([]any, len(w.Nodes))
		for i := range w.Nodes {
			n, err := conv(&w.Nodes[i])
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	}
	pods := func(list []sim.Pod, conv func(*sim.Pod) *v1.Pod) []any {
		out := make([]any, len(list))
		for i := range list {
			out[i] = conv(&list[i])
		}
		return out
	}
	qn, err := nodes(qgpuNode)
	if err != nil {
		return nil, err
	}
	sn, err := nodes(stockNode)
	if err != nil {
		return nil, err
	}
	for name, objs := range map[string][]any{
		"qgpu-node": qn, "stock-node": sn,
		"qgpu-fill": pods(w.Fill, w.qgpuPod), "qgpu-measured": pods(w.Measured, w.qgpuPod),
		"stock-fill": pods(w.Fill, stockPod), "stock-measured": pods(w.Measured, stockPod),
	} {
		t, err := Template(objs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(t), 0o644); err != nil {
			return nil, err
		}
		f.Templates[name] = path
	}
	noop, err := NoopProfile(qgpuProfile, "QGPU", noopName)
	if err != nil {
		return nil, err
	}
	f.NoopProfile = filepath.Join(dir, "noop-profile.yaml")
	return f, os.WriteFile(f.NoopProfile, noop, 0o644)
}

// keyAlphabet encodes a distinct object's number in two characters of a
// template's string constants (64*64 objects at most).
const keyAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// Template is a scheduler_perf template (text/template over .Index, with
// its mod function) that yields objs[.Index] (objs[.Index mod len(objs)]
// past the end): scheduler_perf's templates take one object per op, and
// the trace's pods come in hundreds of shapes, interleaved. Each distinct
// object is written once, as JSON (which is YAML); two string constants
// give each index's object number, and a chain of eq picks its text.
func Template(objs []any) (string, error) {
	if len(objs) == 0 {
		return "", fmt.Errorf("no objects")
	}
	var bodies []string
	num := map[string]int{}
	var hi, lo strings.Builder
	for _, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			return "", err
		}
		s := string(b)
		if strings.Contains(s, "{{") {
			return "", fmt.Errorf("object %s holds the template delimiter", s)
		}
		k, ok := num[s]
		if !ok {
			k = len(bodies)
			if k >= len(keyAlphabet)*len(keyAlphabet) {
				return "", fmt.Errorf("more than %d distinct objects", len(keyAlphabet)*len(keyAlphabet))
			}
			num[s] = k
			bodies = append(bodies, s)
		}
		hi.WriteByte(keyAlphabet[k/len(keyAlphabet)])
		lo.WriteByte(keyAlphabet[k%len(keyAlphabet)])
	}
	var t strings.Builder
	fmt.Fprintf(&t, "{{- $i := mod .Index %d -}}\n", len(objs))
	fmt.Fprintf(&t, "{{- $h := index %q $i -}}\n{{- $l := index %q $i -}}\n", hi.String(), lo.String())
	for k, s := range bodies {
		h, l := k/len(keyAlphabet), k%len(keyAlphabet)
		switch {
		case l == 0 && h == 0:
			fmt.Fprintf(&t, "{{if eq $h %d}}", keyAlphabet[h])
		case l == 0:
			fmt.Fprintf(&t, "{{end}}{{else if eq $h %d}}", keyAlphabet[h])
		}
		if l == 0 {
			fmt.Fprintf(&t, "{{if eq $l %d}}", keyAlphabet[l])
		} else {
			fmt.Fprintf(&t, "{{else if eq $l %d}}", keyAlphabet[l])
		}
		t.WriteString(s)
	}
	t.WriteString("{{end}}{{end}}\n")
	return t.String(), nil
}

// NoopProfile is the scheduler configuration profile with plugin from
// renamed to to in every plugin set, and from's pluginConfig dropped (the
// no-op plugin takes no args). Everything else, percentageOfNodesToScore
// and the other plugins included, stays.
func NoopProfile(profile []byte, from, to string) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(profile, &cfg); err != nil {
		return nil, err
	}
	profiles, _ := cfg["profiles"].([]any)
	renamed := 0
	for _, p := range profiles {
		pm, _ := p.(map[string]any)
		plugins, _ := pm["plugins"].(map[string]any)
		points := make([]string, 0, len(plugins))
		for point := range plugins {
			points = append(points, point)
		}
		sort.Strings(points)
		for _, point := range points {
			set, _ := plugins[point].(map[string]any)
			for _, list := range []string{"enabled", "disabled"} {
				items, _ := set[list].([]any)
				for _, it := range items {
					im, _ := it.(map[string]any)
					if im["name"] == from {
						im["name"] = to
						renamed++
					}
				}
			}
		}
		var kept []any
		pc, _ := pm["pluginConfig"].([]any)
		for _, c := range pc {
			if cm, _ := c.(map[string]any); cm["name"] != from {
				kept = append(kept, c)
			}
		}
		if kept == nil {
			delete(pm, "pluginConfig")
		} else {
			pm["pluginConfig"] = kept
		}
	}
	if renamed == 0 {
		return nil, fmt.Errorf("no plugin %s in the profile", from)
	}
	return yaml.Marshal(cfg)
}

// RunConfig is scheduler_perf's test-case file for run r: one test case
// per case in Order(r), each one workload ("<nodes>Nodes") that creates the
// nodes, the init pods (namespace init, not measured) and the measured pods
// (namespace measured, metrics collected). qgpuProfile is the QGPU
// profile's path; the stock case runs kube-scheduler's default
// configuration (no file). metrics is each test case's
// metricsCollectorConfig (nil: scheduler_perf's default).
func (f *Files) RunConfig(r int, w *Workload, qgpuProfile string, metrics any) (string, error) {
	type op = map[string]any
	var cases []map[string]any
	for _, c := range Order(r) {
		kind := "qgpu"
		if c == CaseStock {
			kind = "stock"
		}
		tc := map[string]any{
			"name":   c,
			"labels": []string{"performance"},
			"workloadTemplate": []op{
				{"opcode": "createNodes", "countParam": "$nodes", "nodeTemplatePath": f.Templates[kind+"-node"]},
				{"opcode": "createPods", "countParam": "$initPods", "podTemplatePath": f.Templates[kind+"-fill"], "namespace": "init"},
				{"opcode": "createPods", "countParam": "$measuredPods", "podTemplatePath": f.Templates[kind+"-measured"], "namespace": "measured", "collectMetrics": true},
			},
			"workloads": []map[string]any{{
				"name":   fmt.Sprintf("%dNodes", len(w.Nodes)),
				"labels": []string{"performance"},
				"params": map[string]int{"nodes": len(w.Nodes), "initPods": len(w.Fill), "measuredPods": len(w.Measured)},
			}},
		}
		if metrics != nil {
			tc["metricsCollectorConfig"] = metrics
		}
		switch c {
		case CaseQGPU:
			tc["schedulerConfigPath"] = qgpuProfile
		case CaseNoop:
			tc["schedulerConfigPath"] = f.NoopProfile
		}
		cases = append(cases, tc)
	}
	b, err := yaml.Marshal(cases)
	if err != nil {
		return "", err
	}
	path := filepath.Join(f.dir, fmt.Sprintf("run-%d.yaml", r))
	return path, os.WriteFile(path, b, 0o644)
}
