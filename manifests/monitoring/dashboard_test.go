// Package monitoring holds the opt-in monitoring manifests (PodMonitors,
// the Grafana dashboard) and the test that the dashboard queries only
// metrics the binaries export.
package monitoring

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics/legacyregistry"
	fwk "k8s.io/kube-scheduler/framework"

	agentmetrics "github.com/qgpu-scheduler/qgpu/agent/metrics"
	"github.com/qgpu-scheduler/qgpu/agent/priority"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

const dashboardFile = "qgpu-dashboard.json"

// TestDashboardQueriesExportedMetrics fails when a query of the dashboard
// (a panel's or a variable's) names a metric neither the agent's registry
// nor the scheduler's (component-base's legacy registry, with the QGPU
// plugin built) exports.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	exprs := dashboardQueries(t, readDashboard(t))
	if len(exprs) < 10 {
		t.Fatalf("found %d queries in %s; the panels were not read", len(exprs), dashboardFile)
	}
	exported := exportedMetrics(t)
	for _, m := range missing(exprs, exported) {
		t.Errorf("%s queries %s, which no binary exports", dashboardFile, m)
	}
}

// The check fails on a dashboard that queries a metric nobody exports:
// here the agent's memory gauge by its name before the switch to bytes.
func TestDashboardCheckCatchesUnknownMetric(t *testing.T) {
	d := readDashboard(t)
	panels := d["panels"].([]any)
	panels = append(panels, map[string]any{"type": "timeseries", "targets": []any{
		map[string]any{"expr": `sum(qgpu_card_memory_granted_gib{node=~"$node"})`}}})
	d["panels"] = panels
	got := missing(dashboardQueries(t, d), exportedMetrics(t))
	if want := []string{"qgpu_card_memory_granted_gib"}; !slices.Equal(got, want) {
		t.Errorf("missing = %v, want %v", got, want)
	}
}

func readDashboard(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// labelValues is a Grafana variable query: label_values(metric, label) or
// label_values(metric{matchers}, label).
var labelValues = regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// dashboardQueries are the PromQL expressions of every panel (rows
// included) and every query variable.
func dashboardQueries(t *testing.T, d map[string]any) []string {
	t.Helper()
	var out []string
	var walk func(panels []any)
	walk = func(panels []any) {
		for _, p := range panels {
			pm, _ := p.(map[string]any)
			targets, _ := pm["targets"].([]any)
			for _, tg := range targets {
				if e, ok := tg.(map[string]any)["expr"].(string); ok && e != "" {
					out = append(out, e)
				}
			}
			if sub, ok := pm["panels"].([]any); ok {
				walk(sub)
			}
		}
	}
	panels, _ := d["panels"].([]any)
	walk(panels)
	templating, _ := d["templating"].(map[string]any)
	vars, _ := templating["list"].([]any)
	for _, v := range vars {
		vm := v.(map[string]any)
		if vm["type"] != "query" {
			continue
		}
		q, _ := vm["query"].(map[string]any)
		s, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(s)
		if m == nil {
			t.Errorf("variable %v: query %q is not label_values(metric, label)", vm["name"], s)
			continue
		}
		out = append(out, m[1])
	}
	return out
}

// missing lists, sorted and once each, the metrics exprs use that are not
// in exported.
func missing(exprs []string, exported map[string]bool) []string {
	var out []string
	for _, e := range exprs {
		for _, m := range metricNames(e) {
			if !exported[m] && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	slices.Sort(out)
	return out
}

// exportedMetrics gathers both binaries' registries after giving every
// metric a sample: families without one are not gathered.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	add := func(g prometheus.Gatherer) {
		fams, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			out[f.GetName()] = true
		}
	}
	add(agentRegistry())
	add(schedulerRegistry(t))
	return out
}

// agentRegistry is qgpu-agent's registry with one card, grants of every
// resource, an Allocate answer and every priority event.
func agentRegistry() prometheus.Gatherer {
	m := agentmetrics.New()
	card := protocol.Card{Index: 0, UUID: "GPU-0", Model: "T4", MemoryMiB: 15109, Healthy: true}
	slice := []protocol.Slice{{Index: 0, UUID: "GPU-0", MemoryGiB: 2, Cores: 20}}
	var grants []store.Grant
	for _, r := range protocol.Resources {
		grants = append(grants, store.Grant{PodUID: "u", Namespace: "ns", Name: "p", Container: "c", Resource: r, Class: protocol.ClassOffline, Slices: slice})
	}
	m.Update([]protocol.Card{card}, grants)
	m.ObserveAllocate(protocol.ResourceMemory, nil)
	id := priority.CardID{Index: 0, UUID: "GPU-0"}
	m.Priority.Suspended(id, priority.ReasonOnlineBusy, time.Millisecond)
	m.Priority.Resumed(id, priority.ReasonOnlineBusy, 100*time.Millisecond)
	m.Priority.FrozenPods(id, 1)
	m.Priority.NVMLError(id)
	m.SetUsageSource(func() []agentmetrics.ContainerUsage {
		return []agentmetrics.ContainerUsage{{Namespace: "ns", Pod: "p", Container: "c", LastKernel: time.Unix(1, 0),
			Cards: []agentmetrics.CardUsage{{Index: 0, UUID: "GPU-0", MemoryBytes: 1, SMPercent: 1}}}}
	})
	return m.Registry
}

// handle is the part of the scheduling framework's handle that the plugin
// uses to feed its ledger: informers of a fake cluster.
type handle struct {
	fwk.Handle
	cs      clientset.Interface
	factory informers.SharedInformerFactory
}

func (h *handle) ClientSet() clientset.Interface                         { return h.cs }
func (h *handle) SharedInformerFactory() informers.SharedInformerFactory { return h.factory }
func (h *handle) EventRecorder() events.EventRecorder                    { return nil }

// ProfileName: from 1.35 the framework's Handle has it (the plugin asks it
// which scheduler it runs in); the embedded nil Handle would panic.
func (h *handle) ProfileName() string { return "qgpu-scheduler" }

// schedulerRegistry builds the QGPU plugin as qgpu-scheduler does, on a
// cluster of one qGPU node, and returns the registry kube-scheduler serves.
func schedulerRegistry(t *testing.T) prometheus.Gatherer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cs := fake.NewClientset([]runtime.Object{builders.GPUNode("n1", false, builders.Cards(1, "T4", 15109))}...)
	h := &handle{cs: cs, factory: informers.NewSharedInformerFactory(cs, 0)}
	if _, err := qgpu.New(ctx, nil, h); err != nil {
		t.Fatal(err)
	}
	h.factory.Start(ctx.Done())
	for typ, ok := range h.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer of %v did not sync", typ)
		}
	}
	// The node handler runs after the cache holds the node: wait until the
	// pool gauges show it, for up to a minute (only a failing test waits
	// it out).
	err := wait.PollUntilContextTimeout(ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		fams, _ := legacyregistry.DefaultGatherer.Gather()
		for _, f := range fams {
			if f.GetName() == "qgpu_scheduler_pool_cards" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the scheduler's pool gauges never showed the node: %v", err)
	}
	return legacyregistry.DefaultGatherer
}
