package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// The demo's pods: the online example, and an offline pod that only fits
// on its card (the other card of the mixed node holds 90 of 100 greedy).
const (
	demoOnline  = "online-pod"
	demoOffline = "colocated-offline"
)

// colocation shows the priority controller at work (issue 7,
// docs/design.md#online-and-offline-pods-at-run-time):
// the online example turns busy on its fake card, the offline pod beside
// it is frozen and shown suspended, then resumed when the online pod is idle.
type colocation struct {
	client     kubernetes.Interface
	kubeconfig string
	nodesDir   string // <cluster dir>/nodes, one root dir per node
	w          io.Writer
}

func (d *colocation) run(ctx context.Context) error {
	on, err := d.client.CoreV1().Pods("default").Get(ctx, demoOnline, metav1.GetOptions{})
	if err != nil || on.Spec.NodeName == "" {
		fmt.Fprintf(d.w, "\nOnline/offline at run time: skipped (no scheduled default/%s)\n", demoOnline)
		return nil
	}
	node := on.Spec.NodeName
	nodeDir := filepath.Join(d.nodesDir, node)
	fmt.Fprintf(d.w, "\nOnline/offline at run time on %s (docs/design.md; agent --fake-activity-file: the\n", node)
	fmt.Fprintf(d.w, "pods get fake GPU processes and cgroups, the priority controller is the real one)\n")
	card, err := d.placeOffline(ctx, on)
	if err != nil || card < 0 {
		return err
	}
	activity := filepath.Join(nodeDir, harness.ActivityFileName)
	if err := d.flip(ctx, activity, "busy", true); err != nil {
		return err
	}
	if err := kubectlQGPU(d.w, d.kubeconfig, "pods", "--node", node); err != nil {
		return err
	}
	if err := kubectlQGPU(d.w, d.kubeconfig, "nodes", "--node", node); err != nil {
		return err
	}
	d.metrics(ctx, nodeDir, "qgpu_priority_")
	if err := d.flip(ctx, activity, "idle", false); err != nil {
		return err
	}
	d.metrics(ctx, nodeDir, "qgpu_priority_resum", "qgpu_priority_frozen")
	return nil
}

// placeOffline creates (or finds) the offline pod and returns its card, or
// -1 when it did not land beside the online pod.
func (d *colocation) placeOffline(ctx context.Context, on *corev1.Pod) (int, error) {
	pod := offlinePod()
	_, err := d.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return -1, err
	}
	var off *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		off, err = d.client.CoreV1().Pods("default").Get(ctx, demoOffline, metav1.GetOptions{})
		return err == nil && off.Annotations[protocol.AnnotationGrant] != "", nil
	})
	if err != nil {
		return -1, fmt.Errorf("default/%s: no grant in 30s: %w", demoOffline, err)
	}
	onCard, offCard := cardOf(on), cardOf(off)
	if off.Spec.NodeName != on.Spec.NodeName || onCard != offCard {
		fmt.Fprintf(d.w, "  default/%s landed on %s card %d, not beside default/%s: skipped\n", demoOffline, off.Spec.NodeName, offCard, demoOnline)
		return -1, nil
	}
	fmt.Fprintf(d.w, "  offline pod default/%s (core-greedy 20) lands beside default/%s on card %d\n", demoOffline, demoOnline, offCard)
	return offCard, nil
}

// flip writes the online pod's activity and waits until the offline pod
// shows (or no longer shows) qgpu.io/suspended.
func (d *colocation) flip(ctx context.Context, activity, state string, suspended bool) error {
	fmt.Fprintf(d.w, "\n$ echo 'default/%s %s' > %s\n", demoOnline, state, activity)
	start := time.Now()
	if err := harness.WriteActivity(activity, "default/"+demoOnline+" "+state); err != nil {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := d.client.CoreV1().Pods("default").Get(ctx, demoOffline, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		_, on := p.Annotations[protocol.AnnotationSuspended]
		return on == suspended, nil
	})
	if err != nil {
		return fmt.Errorf("default/%s suspended=%v not shown in 10s: %w", demoOffline, suspended, err)
	}
	what := "suspended (cgroup frozen)"
	if !suspended {
		what = "resumed (thawed; the annotation is written at most once a second per pod)"
	}
	fmt.Fprintf(d.w, "  default/%s %s, shown after %v\n", demoOffline, what, time.Since(start).Round(10*time.Millisecond))
	return nil
}

// metrics prints the agent's samples of the metrics named with prefixes,
// without histogram buckets.
func (d *colocation) metrics(ctx context.Context, nodeDir string, prefixes ...string) {
	addr, err := harness.ReadMetricsAddr(nodeDir)
	if err == nil {
		var page string
		if page, err = harness.FetchMetrics(ctx, addr); err == nil {
			fmt.Fprintf(d.w, "\n$ curl -s %s/metrics | grep -E '^(%s)' | grep -v _bucket\n", addr, strings.Join(prefixes, "|"))
			for _, line := range strings.Split(page, "\n") {
				for _, p := range prefixes {
					if strings.HasPrefix(line, p) && !strings.Contains(line, "_bucket{") {
						fmt.Fprintln(d.w, line)
						break
					}
				}
			}
			return
		}
	}
	fmt.Fprintf(d.w, "  (no metrics: %v)\n", err)
}

func offlinePod() *corev1.Pod {
	res := corev1.ResourceList{
		protocol.ResourceMemory:     resource.MustParse("4"),
		protocol.ResourceCoreGreedy: resource.MustParse("20"),
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: demoOffline, Namespace: "default",
			Annotations: map[string]string{protocol.AnnotationAppClass: string(protocol.ClassOffline)}},
		Spec: corev1.PodSpec{SchedulerName: protocol.SchedulerName, Containers: []corev1.Container{{
			Name: "batch", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Limits: res, Requests: res.DeepCopy()},
		}}},
	}
}

// cardOf is the first card of the pod's assignment (-1: none).
func cardOf(p *corev1.Pod) int {
	a, err := protocol.DecodeAssignment([]byte(p.Annotations[protocol.AnnotationAssignment]))
	if err != nil || len(a.Containers) == 0 || len(a.Containers[0].Slices) == 0 {
		return -1
	}
	return a.Containers[0].Slices[0].Index
}

// runColocation is --colocation: the demo against the playground that
// `make playground-up` keeps running in o.dir.
func runColocation(ctx context.Context, o options, w io.Writer) error {
	kubeconfig := filepath.Join(o.dir, "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("no running playground (make playground-up): %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200 // the demo polls the offline pod every 20 ms
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	demo := &colocation{client: client, kubeconfig: kubeconfig, nodesDir: filepath.Join(o.dir, "cluster", "nodes"), w: w}
	return demo.run(ctx)
}
