package qgpu

import (
	"context"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/qgpu-scheduler/qgpu/config/args"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/typical"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// assigned is pod as PreBind leaves it (the assignment of one container
// "c" to slices on node) and, when bind is set, bound there.
func assigned(pod *v1.Pod, node string, bind bool, slices ...protocol.Slice) *v1.Pod {
	a := protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(pod.UID), Node: node, Class: protocol.ClassGeneral,
		Containers: []protocol.ContainerAssignment{{Name: "c", Slices: slices}}}
	pod.Annotations[protocol.AnnotationAssignment], _ = a.Encode()
	if bind {
		pod.Spec.NodeName = node
	}
	return pod
}

func t4Slice(card int, mem, cores int64) protocol.Slice {
	return protocol.Slice{Index: card, UUID: builders.Cards(2, "Tesla-T4", 15109)[card].UUID, MemoryGiB: mem, Cores: cores}
}

// cpuPodOn is a pod without qGPU requests bound to node by the default scheduler.
func cpuPodOn(name, node string, milli int64) *v1.Pod {
	pod := builders.GPUPod(name).CPU(milli).Obj()
	pod.Spec.SchedulerName, pod.Spec.NodeName = "default-scheduler", node
	return pod
}

// learnedFrom is the workload of a learner that counted pods, each once.
func learnedFrom(t *testing.T, pods ...*v1.Pod) *typical.Learner {
	t.Helper()
	l := typical.NewLearner()
	for _, pod := range pods {
		req, err := request.Parse(pod)
		if err != nil {
			t.Fatal(err)
		}
		l.Observe(req, podCPU(pod))
	}
	return l
}

// startWatching builds the plugin (fragfit) on a fake cluster of objs,
// starts its informers and waits until PreFilter would place pods.
func startWatching(t *testing.T, ctx context.Context, objs ...runtime.Object) (*QGPU, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(cs, 0)
	pl, err := New(ctx, &args.QGPUArgs{NodePolicy: "fragfit", CardPolicy: "fragfit"}, &fakeHandle{cs: cs, factory: factory})
	if err != nil {
		t.Fatal(err)
	}
	p := pl.(*QGPU)
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		t.Fatal("caches did not sync")
	}
	return p, cs
}

// sameWorkload reports whether the plugin learned what want did.
func sameWorkload(p *QGPU, want *typical.Learner) bool {
	return reflect.DeepEqual(p.workload.Load(), want.Load())
}

// relabel updates a pod without changing what is learned of it; the
// informer delivers it as an update of a bound pod.
func relabel(t *testing.T, ctx context.Context, cs *fake.Clientset, name string) {
	t.Helper()
	pods := cs.CoreV1().Pods("default")
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Labels = map[string]string{"touched": "yes"}
	if _, err := pods.Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A scheduler started (or restarted) over a cluster of bound pods has, as
// soon as it would place a pod, the shapes of those pods: GPU pods with
// the scheduler's assignments and CPU-only pods on qGPU nodes, each once;
// not pods on nodes without cards, finished pods, or assignments not made
// for their pod. Later updates of those pods count nothing again; a pod
// counted at start and deleted leaves as any other (Forget). Before
// 2026-11-27 the workload stayed empty (nil) here.
func TestLearnerRebuiltFromBoundPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := assigned(builders.GPUPod("a").General("c", 4, 40).CPU(2000).Obj(), "gpu", true, t4Slice(0, 4, 40))
	b := assigned(builders.GPUPod("b").General("c", 4, 40).CPU(2000).Obj(), "gpu", true, t4Slice(0, 4, 40))
	c := assigned(builders.GPUPod("c").General("c", 8, 20).CPU(4000).Obj(), "gpu", true, t4Slice(1, 8, 20))
	cpu := cpuPodOn("cpu", "gpu", 1000)
	plain := cpuPodOn("plain", "plain", 3000)
	done := assigned(builders.GPUPod("done").General("c", 2, 10).CPU(500).Obj(), "gpu", true, t4Slice(1, 2, 10))
	done.Status.Phase = v1.PodSucceeded
	forged := assigned(builders.GPUPod("forged").General("c", 2, 10).CPU(500).Obj(), "gpu", true, t4Slice(1, 2, 10))
	forged.UID = "uid-not-forged"

	p, cs := startWatching(t, ctx, t4Node("gpu", 2, false), plainNode("plain"), a, b, c, cpu, plain, done, forged)
	want := learnedFrom(t, a, b, c, cpu)
	if !sameWorkload(p, want) {
		t.Fatalf("workload after start %+v, want %+v (the shapes of a, b, c and cpu)", p.workload.Load(), want.Load())
	}

	relabel(t, ctx, cs, "a")
	relabel(t, ctx, cs, "cpu")
	later := cpuPodOn("later", "gpu", 1000) // events arrive in order: once later counts, the updates were seen
	if _, err := cs.CoreV1().Pods("default").Create(ctx, later, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want = learnedFrom(t, a, b, c, cpu, later)
	waitFor(t, func() bool { return sameWorkload(p, want) })

	if err := cs.CoreV1().Pods("default").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	req, _ := request.Parse(a)
	waitFor(t, func() bool { return p.workload.ObservePod(a.UID, req, 2000) })
}

// A standby replica learns the leader's pods as the leader binds them:
// PreBind writes the assignment, Bind sets the node, and the standby's
// informer sees the pod bound with its assignment (before 2026-11-27 it
// skipped every such pod). The leader's own count in Reserve and its
// informer's do not add up: a pod counts once, by UID.
func TestStandbyLearnsLeadersPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, cs := startWatching(t, ctx, t4Node("gpu", 2, false))
	if p.workload.Load() != nil {
		t.Fatal("a workload learned from an empty cluster")
	}
	pods := cs.CoreV1().Pods("default")
	bindAsLeader := func(pod *v1.Pod, node string, slices ...protocol.Slice) {
		t.Helper()
		if len(slices) > 0 {
			assigned(pod, node, false, slices...)
		}
		created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Spec.NodeName = node
		if _, err := pods.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a := builders.GPUPod("a").General("c", 4, 40).CPU(2000).Obj()
	c := builders.GPUPod("c").General("c", 8, 20).CPU(4000).Obj()
	cpu := builders.GPUPod("cpu").CPU(1000).Obj()
	bindAsLeader(a, "gpu", t4Slice(0, 4, 40))
	bindAsLeader(c, "gpu", t4Slice(1, 8, 20))
	bindAsLeader(cpu, "gpu")
	want := learnedFrom(t, a, c, cpu)
	waitFor(t, func() bool { return sameWorkload(p, want) })

	req, _ := request.Parse(a)
	if p.workload.ObservePod(a.UID, req, 2000) {
		t.Fatal("pod a counted again when Reserve reported it")
	}
	relabel(t, ctx, cs, "a")
	d := builders.GPUPod("d").General("c", 4, 40).CPU(2000).Obj()
	bindAsLeader(d, "gpu", t4Slice(0, 4, 40))
	want = learnedFrom(t, a, c, cpu, d)
	waitFor(t, func() bool { return sameWorkload(p, want) })
}
