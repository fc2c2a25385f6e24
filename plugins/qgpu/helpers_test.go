package qgpu

import (
	"context"
	"sort"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/args"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// fakeHandle is the part of fwk.Handle the plugin uses.
type fakeHandle struct {
	fwk.Handle
	cs      clientset.Interface
	factory informers.SharedInformerFactory
	profile string
	// onActivate sees the pods the plugin activates, sorted by key.
	onActivate func([]string)
	// recorder is the profile's event recorder; nil drops events.
	recorder events.EventRecorder
}

func (h *fakeHandle) ProfileName() string { return h.profile }

// SnapshotSharedLister: no snapshot (the policies then see no node CPU).
func (h *fakeHandle) SnapshotSharedLister() fwk.SharedLister { return nil }

func (h *fakeHandle) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	if h.onActivate == nil {
		return
	}
	keys := make([]string, 0, len(pods))
	for k := range pods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h.onActivate(keys)
}

func (h *fakeHandle) ClientSet() clientset.Interface                         { return h.cs }
func (h *fakeHandle) SharedInformerFactory() informers.SharedInformerFactory { return h.factory }
func (h *fakeHandle) EventRecorder() events.EventRecorder                    { return h.recorder }

// newPlugin returns a plugin without informers, its ledger fed by setNodes.
func newPlugin(t testing.TB, a *args.QGPUArgs, objs ...*v1.Pod) *QGPU {
	t.Helper()
	return newPluginOn(t, &fakeHandle{cs: fake.NewClientset()}, a, objs...)
}

// newPluginOn is newPlugin on a handle without informers; objs are created
// in its clientset.
func newPluginOn(t testing.TB, h *fakeHandle, a *args.QGPUArgs, objs ...*v1.Pod) *QGPU {
	t.Helper()
	for _, p := range objs {
		if _, err := h.cs.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var obj runtime.Object
	if a != nil {
		obj = a
	}
	pl, err := New(context.Background(), obj, h)
	if err != nil {
		t.Fatal(err)
	}
	return pl.(*QGPU)
}

func (p *QGPU) setNodes(nodes ...*v1.Node) {
	for _, n := range nodes {
		setNode(context.Background(), p.handle, p.ledger, n)
	}
}

func nodeInfo(n *v1.Node) fwk.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(n)
	return ni
}

// schedule runs PreFilter, Filter on every node, Score, Reserve on the best
// node and PreBind, as one scheduling cycle would; it returns the node chosen.
func schedule(t testing.TB, p *QGPU, pod *v1.Pod, nodes ...*v1.Node) (string, *fwk.Status) {
	t.Helper()
	ctx := context.Background()
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
		return "", st
	}
	best, bestScore := "", int64(-1)
	var last *fwk.Status
	for _, n := range nodes {
		ni := nodeInfo(n)
		if st := p.Filter(ctx, cs, pod, ni); !st.IsSuccess() {
			last = st
			continue
		}
		s, st := p.Score(ctx, cs, pod, ni)
		if !st.IsSuccess() {
			t.Fatalf("Score: %v", st)
		}
		if s > bestScore {
			best, bestScore = n.Name, s
		}
	}
	if best == "" {
		return "", last
	}
	if st := p.Reserve(ctx, cs, pod, best); !st.IsSuccess() {
		return "", st
	}
	pods := p.handle.ClientSet().CoreV1().Pods(pod.Namespace)
	if _, err := pods.Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if st := p.PreBind(ctx, cs, pod, best); !st.IsSuccess() {
		t.Fatalf("PreBind: %v", st)
	}
	return best, nil
}

func t4Node(name string, n int, mixed bool) *v1.Node {
	return builders.GPUNode(name, mixed, builders.Cards(n, "Tesla-T4", 15109))
}

func v100Node(name string, n int, mixed bool) *v1.Node {
	return builders.GPUNode(name, mixed, builders.Cards(n, "Tesla-V100-SXM2-32GB", 32510))
}
