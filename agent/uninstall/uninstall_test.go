package uninstall

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/qgpu-scheduler/qgpu/agent/xgn"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// hostTree writes what an agent leaves on a node, and files of others
// beside each, and returns the config pointing at it and the others' paths.
func hostTree(t *testing.T) (Config, []string) {
	t.Helper()
	root := t.TempDir()
	cfg := Config{
		Node:            "n1",
		DBFile:          filepath.Join(root, "qgpu", "meta.db"),
		DevicePluginDir: filepath.Join(root, "device-plugins"),
		CDISpecDir:      filepath.Join(root, "cdi"),
		HAMiRegionRoot:  filepath.Join(root, "regions"),
	}
	ours := []string{
		cfg.DBFile,
		filepath.Join(cfg.DevicePluginDir, "qgpu-memory.sock"),
		filepath.Join(cfg.DevicePluginDir, "qgpu-vcuda-core.sock"),
		filepath.Join(cfg.CDISpecDir, "qgpu.io-container_uid-1_main.yaml"),
		filepath.Join(cfg.HAMiRegionRoot, "uid-1_main", "cudevshr.cache"),
	}
	others := []string{
		filepath.Join(cfg.DevicePluginDir, "kubelet.sock"),
		filepath.Join(cfg.DevicePluginDir, "nvidia-gpu.sock"),
		filepath.Join(cfg.CDISpecDir, "nvidia.yaml"),
		filepath.Join(cfg.HAMiRegionRoot, "README"),
	}
	for _, p := range append(slices.Clone(ours), others...) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cfg, others
}

func node(annotations map[string]string, taints ...v1.Taint) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: annotations, ResourceVersion: "7"}, Spec: v1.NodeSpec{Taints: taints}}
}

// Uninstall removes the agent's sockets, CDI specs, region directories and
// store, the inventory annotation and the xgn taint, and nothing of
// others; a second run removes nothing and succeeds.
func TestRunRemovesOnlyWhatTheAgentWrote(t *testing.T) {
	cfg, others := hostTree(t)
	other := v1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: v1.TaintEffectNoSchedule}
	cfg.Client = fake.NewClientset(node(map[string]string{protocol.AnnotationInventory: "{}", "keep": "me"}, other, xgn.Taint),
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Annotations: map[string]string{protocol.AnnotationInventory: "{}"}}})
	ctx := context.Background()
	done, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"removed " + filepath.Join(cfg.CDISpecDir, "qgpu.io-container_uid-1_main.yaml"),
		"removed " + filepath.Join(cfg.DevicePluginDir, "qgpu-memory.sock"),
		"removed " + filepath.Join(cfg.DevicePluginDir, "qgpu-vcuda-core.sock"),
		"removed " + cfg.DBFile,
		"removed " + filepath.Join(cfg.HAMiRegionRoot, "uid-1_main"),
		"node n1: removed annotation " + protocol.AnnotationInventory,
		"node n1: removed taint " + xgn.TaintKey,
	}
	slices.Sort(want[:5])
	if !slices.Equal(done, want) {
		t.Errorf("done\n%s\nwant\n%s", strings.Join(done, "\n"), strings.Join(want, "\n"))
	}
	for _, p := range others {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("another's file %s: %v", p, err)
		}
	}
	n, err := cfg.Client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Annotations[protocol.AnnotationInventory]; ok || n.Annotations["keep"] != "me" {
		t.Errorf("annotations after: %v", n.Annotations)
	}
	if !slices.Equal(n.Spec.Taints, []v1.Taint{other}) {
		t.Errorf("taints after: %v, want only %v", n.Spec.Taints, other)
	}
	n2, _ := cfg.Client.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
	if _, ok := n2.Annotations[protocol.AnnotationInventory]; !ok {
		t.Errorf("node n2's annotation removed by n1's uninstall")
	}
	again, err := Run(ctx, cfg)
	if err != nil || len(again) != 0 {
		t.Errorf("second run: %v, %v; want nothing removed and no error", again, err)
	}
}

// While a pod on the node holds or asks for qGPU slices, Run refuses,
// names it and removes nothing; Force goes ahead; pods that ended, pods
// of other nodes and CPU pods do not count.
func TestRunRefusesWhileQGPUPodsRun(t *testing.T) {
	cfg, _ := hostTree(t)
	on := func(p *v1.Pod, node string, phase v1.PodPhase) *v1.Pod {
		p.Spec.NodeName, p.Status.Phase = node, phase
		return p
	}
	running := on(builders.GPUPod("train").General("c", 4, 30).Obj(), "n1", v1.PodRunning)
	objs := []any{
		node(map[string]string{protocol.AnnotationInventory: "{}"}),
		on(builders.GPUPod("done").General("c", 4, 30).Obj(), "n1", v1.PodSucceeded),
		on(builders.GPUPod("elsewhere").General("c", 4, 30).Obj(), "n2", v1.PodRunning),
		on(builders.GPUPod("cpu").CPU(100).Obj(), "n1", v1.PodRunning),
	}
	build := func(extra ...any) Config {
		c := cfg
		var rt []any
		rt = append(append(rt, objs...), extra...)
		c.Client = fake.NewClientset(toObjects(rt)...)
		return c
	}
	if done, err := Run(context.Background(), build(running)); !errors.Is(err, ErrPodsRemain) || !strings.Contains(err.Error(), "default/train") || len(done) != 0 {
		t.Fatalf("with a running qGPU pod: %v, %v; want a refusal naming default/train and nothing removed", done, err)
	}
	if _, err := os.Stat(cfg.DBFile); err != nil {
		t.Fatalf("the store is gone after a refusal: %v", err)
	}
	forced := build(running)
	forced.Force = true
	if done, err := Run(context.Background(), forced); err != nil || len(done) == 0 {
		t.Fatalf("with --force: %v, %v", done, err)
	}
	cfg2, _ := hostTree(t)
	cfg = cfg2
	if _, err := Run(context.Background(), build()); err != nil {
		t.Errorf("with only ended, other nodes' and CPU pods: %v", err)
	}
}

func toObjects(in []any) []runtime.Object {
	out := make([]runtime.Object, 0, len(in))
	for _, o := range in {
		out = append(out, o.(runtime.Object))
	}
	return out
}
