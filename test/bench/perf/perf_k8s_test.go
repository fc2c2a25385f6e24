package perf

// The Kubernetes-version-dependent part of make bench-perf, kept to this
// file: scheduler_perf's entry points, the framework's plugin registry and
// the no-op plugin's signatures (Kubernetes v1.35: the plugin interfaces
// in k8s.io/kube-scheduler/framework).

import (
	"context"
	"flag"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	benchmark "k8s.io/kubernetes/test/integration/scheduler_perf"

	// Registers the qgpu args (kind QGPUArgs) in kube-scheduler's scheme,
	// which scheduler_perf decodes the profile with.
	_ "github.com/qgpu-scheduler/qgpu/config/args/v1"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu"
)

// initScheduler is scheduler_perf's InitTests: its flags (-data-items-dir,
// -perf-scheduling-label-filter, logging) and the logging setup.
func initScheduler() error { return benchmark.InitTests() }

// setDataItemsDir points scheduler_perf's JSON output at dir.
func setDataItemsDir(dir string) error { return flag.Set("data-items-dir", dir) }

// runPerf runs scheduler_perf's benchmark on the test cases of configFile
// with QGPU and the no-op plugin registered, as cmd/qgpu-scheduler
// registers QGPU (command.Options); its per-plugin metrics include both.
func runPerf(b *testing.B, configFile, topic string) {
	benchmark.RunBenchmarkPerfScheduling(b, configFile, topic, frameworkruntime.Registry{
		qgpu.Name: qgpu.New,
		NoopName:  newNoop,
	})
}

// metricsConfig is scheduler_perf's default metrics collector
// configuration (scheduler_perf.go, defaultMetricsCollectorConfig) with
// QGPU and the no-op plugin among the plugins whose execution time it
// collects: the default captured benchmark.PluginNames at its
// initialisation. For RunConfig's metricsCollectorConfig.
func metricsConfig() map[string]any {
	type lv = map[string]any
	points := metrics.ExtensionPoints
	plugins := append(append([]string(nil), benchmark.PluginNames...), qgpu.Name, NoopName)
	return map[string]any{"metrics": map[string]any{
		"scheduler_framework_extension_point_duration_seconds": []lv{{"label": "extension_point", "values": points}},
		"scheduler_scheduling_attempt_duration_seconds": []lv{{"label": "result",
			"values": []string{metrics.ScheduledResult, metrics.UnschedulableResult, metrics.ErrorResult}}},
		"scheduler_pod_scheduling_duration_seconds": nil,
		"scheduler_plugin_execution_duration_seconds": []lv{{"label": "plugin", "values": plugins},
			{"label": "extension_point", "values": points}},
	}}
}

// NoopName is the no-op plugin's name in the no-op profile.
const NoopName = "QGPUNoop"

// noop registers the extension points QGPU implements and does nothing at
// any of them: every node passes, every score is 0, Bind and PreBind are
// skipped (DefaultBinder binds, as it binds QGPU's pods where QGPU skips).
// It registers no cluster events: it never rejects a pod.
type noop struct{}

var (
	_ fwk.PreFilterPlugin   = noop{}
	_ fwk.FilterPlugin      = noop{}
	_ fwk.ScorePlugin       = noop{}
	_ fwk.ReservePlugin     = noop{}
	_ fwk.PreBindPlugin     = noop{}
	_ fwk.BindPlugin        = noop{}
	_ fwk.EnqueueExtensions = noop{}
)

func newNoop(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return noop{}, nil
}

func (noop) Name() string { return NoopName }

func (noop) PreFilter(context.Context, fwk.CycleState, *v1.Pod, []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	return nil, nil
}
func (noop) PreFilterExtensions() fwk.PreFilterExtensions { return noop{} }
func (noop) AddPod(context.Context, fwk.CycleState, *v1.Pod, fwk.PodInfo, fwk.NodeInfo) *fwk.Status {
	return nil
}
func (noop) RemovePod(context.Context, fwk.CycleState, *v1.Pod, fwk.PodInfo, fwk.NodeInfo) *fwk.Status {
	return nil
}
func (noop) Filter(context.Context, fwk.CycleState, *v1.Pod, fwk.NodeInfo) *fwk.Status { return nil }
func (noop) Score(context.Context, fwk.CycleState, *v1.Pod, fwk.NodeInfo) (int64, *fwk.Status) {
	return 0, nil
}
func (noop) ScoreExtensions() fwk.ScoreExtensions { return noop{} }
func (noop) NormalizeScore(context.Context, fwk.CycleState, *v1.Pod, fwk.NodeScoreList) *fwk.Status {
	return nil
}
func (noop) Reserve(context.Context, fwk.CycleState, *v1.Pod, string) *fwk.Status { return nil }
func (noop) Unreserve(context.Context, fwk.CycleState, *v1.Pod, string)           {}
func (noop) PreBindPreFlight(context.Context, fwk.CycleState, *v1.Pod, string) *fwk.Status {
	return fwk.NewStatus(fwk.Skip)
}
func (noop) PreBind(context.Context, fwk.CycleState, *v1.Pod, string) *fwk.Status { return nil }
func (noop) Bind(context.Context, fwk.CycleState, *v1.Pod, string) *fwk.Status {
	return fwk.NewStatus(fwk.Skip)
}
func (noop) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) { return nil, nil }
