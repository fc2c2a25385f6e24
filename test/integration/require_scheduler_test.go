package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

const requireSchedulerPolicy = "manifests/admission/require-scheduler.yaml"

// startRequireScheduler is a real kube-apiserver with the shipped
// qgpu-require-scheduler policy active (its informer has picked it up).
func startRequireScheduler(t *testing.T) kubernetes.Interface {
	t.Helper()
	cp := harness.StartWith(t, harness.ControlPlaneOptions{})
	ctx := context.Background()
	objs, err := harness.ReadManifests(requireSchedulerPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Apply(ctx, cp.Config, objs, false); err != nil {
		t.Fatalf("applying %s: %v", requireSchedulerPolicy, err)
	}
	if err := harness.WaitRequireScheduler(ctx, cp.Client); err != nil {
		t.Fatal(err)
	}
	return cp.Client
}

func createDry(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) (*corev1.Pod, error) {
	return cs.CoreV1().Pods(p.Namespace).Create(ctx, p.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}

// refusal is the policy's message in an apiserver error, "" when the pod
// was admitted; other errors fail the test.
func refusal(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	msg, ok := harness.AdmissionRefusal(err)
	if !ok {
		t.Fatalf("not an admission refusal: %v", err)
	}
	return msg
}

// schedulerWords is what the scheduler says of the pod: request.Parse's
// refusal without its "invalid qGPU request: " prefix, "" when it accepts.
func schedulerWords(p *corev1.Pod) string {
	_, err := request.Parse(p)
	if err == nil {
		return ""
	}
	if !errors.Is(err, request.ErrInvalid) {
		return "unexpected: " + err.Error()
	}
	return strings.TrimPrefix(err.Error(), request.ErrInvalid.Error()+": ")
}

// TestRequireSchedulerPolicy applies manifests/admission/require-scheduler
// to a real kube-apiserver and creates pods (server-side dry run): a pod
// asking for qGPU or vocabulary resources without qgpu-scheduler is refused
// with the fix named, a namespace's opt-out label lets it through and a
// pod's does not, pods of NVIDIA's device plugin and CPU pods are
// untouched, and each native request rule the policy carries refuses with
// the scheduler's own words.
func TestRequireSchedulerPolicy(t *testing.T) {
	cs := startRequireScheduler(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "opted-out",
		Labels: map[string]string{"qgpu.io/admission": "ignore"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sched := func(p *corev1.Pod, s string) *corev1.Pod { p.Spec.SchedulerName = s; return p }
	label := func(p *corev1.Pod, k, v string) *corev1.Pod { p.Labels = map[string]string{k: v}; return p }
	ns := func(p *corev1.Pod, n string) *corev1.Pod { p.Namespace = n; return p }
	withInit := func(p *corev1.Pod, res map[string]int64) *corev1.Pod {
		q := builders.GPUPod("x").Container("init", res).Obj()
		p.Spec.InitContainers = q.Spec.Containers
		return p
	}
	general := func(name string, mem, core int64) *corev1.Pod {
		return builders.GPUPod(name).General("c", mem, core).Obj()
	}
	res := func(name string, r map[string]int64) *corev1.Pod {
		return builders.GPUPod(name).Container("c", r).Obj()
	}
	const noScheduler = `pod asks for qGPU resources but spec.schedulerName is "default-scheduler": set spec.schedulerName: qgpu-scheduler`
	cases := []struct {
		name string
		pod  *corev1.Pod
		want string // a prefix of the refusal; "" admitted
	}{
		{"qgpu pod of qgpu-scheduler", general("ok", 4, 30), ""},
		{"no schedulerName", sched(general("nosched", 4, 30), ""), noScheduler},
		{"another scheduler", sched(general("volcano", 4, 30), "volcano"), `pod asks for qGPU resources but spec.schedulerName is "volcano"`},
		{"vcuda without schedulerName", sched(res("vcuda", map[string]int64{"nvidia.com/vcuda-core": 20, "nvidia.com/vcuda-memory": 4}), ""), noScheduler},
		{"hami pod of HAMi's scheduler", sched(res("hami-own", map[string]int64{"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}), "hami-scheduler"), ""},
		{"vcuda pod of another scheduler", sched(res("vcuda-volcano", map[string]int64{"nvidia.com/vcuda-core": 20, "nvidia.com/vcuda-memory": 4}), "volcano"), ""},
		{"hami without schedulerName", sched(res("hami", map[string]int64{"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}), ""), noScheduler},
		{"t9k init container without schedulerName", sched(withInit(builders.GPUPod("t9k").Container("c", nil).Obj(),
			map[string]int64{"tensorstack.dev/nvidia-gpu": 1}), ""), noScheduler},
		{"NVIDIA device plugin pod", sched(res("nvidia", map[string]int64{"nvidia.com/gpu": 1}), ""), ""},
		{"CPU pod", sched(builders.GPUPod("cpu").CPU(500).Obj(), ""), ""},
		{"opted-out namespace", ns(sched(general("nsout", 4, 30), ""), "opted-out"), ""},
		// The opt-out is the namespace's: the pod's creator sets its labels.
		{"pod label does not opt out", label(sched(general("podout", 4, 30), ""), "qgpu.io/admission", "ignore"), noScheduler},
		{"other pod label", label(sched(general("podin", 4, 30), ""), "qgpu.io/admission", "enforce"), noScheduler},
		// The native request rules, in the scheduler's words.
		{"core 150", general("c150", 4, 150), "containers[c]: tke.cloud.tencent.com/qgpu-core: value 150 above 100 must be a multiple of 100 (whole cards)"},
		{"core 0", general("c0", 4, 0), "containers[c]: tke.cloud.tencent.com/qgpu-core: value 0 must be between 1 and 99, or a multiple of 100 for whole cards"},
		{"no core", res("nocore", map[string]int64{protocol.ResourceMemory: 4}), "containers[c]: tke.cloud.tencent.com/qgpu-core: value 0 must be between 1"},
		{"65 cards", general("c6500", 65, 6500), "containers[c]: tke.cloud.tencent.com/qgpu-core: value 6500 asks for more than 64 cards"},
		{"memory uneven", general("uneven", 5, 200), "containers[c]: tke.cloud.tencent.com/qgpu-memory: value 5 must split evenly over the 2 whole cards"},
		{"no memory", res("nomem", map[string]int64{protocol.ResourceCore: 30}), "containers[c]: tke.cloud.tencent.com/qgpu-memory: missing"},
		{"memory 0", general("mem0", 0, 30), "containers[c]: tke.cloud.tencent.com/qgpu-memory: value 0 must be between 1 and 16384 GiB"},
		{"greedy in a general pod", res("greedy", map[string]int64{protocol.ResourceMemory: 4, protocol.ResourceCoreGreedy: 30}), "containers[c]: tke.cloud.tencent.com/qgpu-core-greedy: value 30 is for offline pods"},
		{"online with core", builders.GPUPod("onl").Class(protocol.ClassOnline).General("c", 4, 30).Obj(), "containers[c]: tke.cloud.tencent.com/qgpu-core: value 30: online pods ask for"},
		{"offline with core", builders.GPUPod("offc").Class(protocol.ClassOffline).General("c", 4, 30).Obj(), "containers[c]: tke.cloud.tencent.com/qgpu-core: value 30: offline pods ask for"},
		{"offline greedy 101", builders.GPUPod("off101").Offline("c", 4, 101).Obj(), "containers[c]: tke.cloud.tencent.com/qgpu-core-greedy: value 101 must be between 1 and 100"},
		{"offline two containers over 100", builders.GPUPod("off2").Offline("a", 4, 60).Offline("b", 4, 60).Obj(), "offline pod: tke.cloud.tencent.com/qgpu-core-greedy: total 120"},
		{"online memory over a card", builders.GPUPod("onl2").Online("a", 9000).Online("b", 9000).Obj(), "online pod: tke.cloud.tencent.com/qgpu-memory: total 18000 GiB"},
		{"class general written out", builders.GPUPod("gen").Annotation(protocol.AnnotationAppClass, "general").General("c", 4, 30).Obj(), `annotation tke.cloud.tencent.com/app-class: unsupported value "general"`},
		{"qgpu in an init container", withInit(general("initq", 4, 30), map[string]int64{protocol.ResourceMemory: 1, protocol.ResourceCore: 10}), "initContainers[init]: tke.cloud.tencent.com/qgpu-memory: qGPU resources are supported in regular containers only"},
		{"nvidia.com/gpu beside qgpu", builders.GPUPod("mixed").General("c", 4, 30).Container("d", map[string]int64{"nvidia.com/gpu": 1}).Obj(), "containers[d]: nvidia.com/gpu cannot be combined with qGPU resources in one pod"},
		{"second container breaks a rule", builders.GPUPod("second").General("a", 4, 30).General("b", 4, 150).Obj(), "containers[b]: tke.cloud.tencent.com/qgpu-core: value 150 above 100"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := createDry(ctx, cs, c.pod)
			got := refusal(t, err)
			switch {
			case c.want == "" && got != "":
				t.Fatalf("refused: %s", got)
			case c.want != "" && !strings.HasPrefix(got, c.want):
				t.Fatalf("refusal %q, want it to start with %q", got, c.want)
			}
			if c.pod.Spec.SchedulerName != protocol.SchedulerName || c.pod.Namespace != "default" || c.pod.Labels != nil {
				return // not a request-rule case
			}
			if words := schedulerWords(c.pod); got != words {
				t.Errorf("the policy says %q, the scheduler %q", got, words)
			}
		})
	}
}

// TestRequireSchedulerAgreesWithScheduler creates every combination of
// class and native amounts around each rule's bounds (one and two
// containers) and checks that the policy refuses exactly the pods the
// scheduler's request parser refuses, with the parser's words: the policy
// never turns away a pod the scheduler would place, and never lets through
// one it would leave Pending.
func TestRequireSchedulerAgreesWithScheduler(t *testing.T) {
	cs := startRequireScheduler(t)
	ctx := context.Background()
	classes := []string{"", string(protocol.ClassOnline), string(protocol.ClassOffline), "batch"}
	amounts := map[string][]int64{ // -1: absent
		protocol.ResourceMemory:     {-1, 0, 1, 3, 16384, 16385},
		protocol.ResourceCore:       {-1, 0, 1, 99, 100, 101, 200, 6400, 6500},
		protocol.ResourceCoreGreedy: {-1, 0, 50, 100, 101},
	}
	container := func(mem, core, greedy int64) map[string]int64 {
		r := map[string]int64{}
		for name, v := range map[string]int64{protocol.ResourceMemory: mem, protocol.ResourceCore: core, protocol.ResourceCoreGreedy: greedy} {
			if v >= 0 {
				r[name] = v
			}
		}
		return r
	}
	var pods []*corev1.Pod
	n := 0
	add := func(class string, containers ...map[string]int64) {
		b := builders.GPUPod(fmt.Sprintf("p%d", n))
		n++
		if class != "" {
			b.Annotation(protocol.AnnotationAppClass, class)
		}
		for i, r := range containers {
			b.Container(fmt.Sprintf("c%d", i), r)
		}
		pods = append(pods, b.Obj())
	}
	for _, class := range classes {
		for _, mem := range amounts[protocol.ResourceMemory] {
			for _, core := range amounts[protocol.ResourceCore] {
				for _, greedy := range amounts[protocol.ResourceCoreGreedy] {
					if mem < 0 && core < 0 && greedy < 0 {
						continue // asks for nothing: not matched
					}
					add(class, container(mem, core, greedy))
				}
			}
		}
		// Two containers: the per-pod totals of online and offline pods.
		add(class, container(8200, -1, 50), container(8200, -1, 51))
		add(class, container(8192, -1, 50), container(8192, -1, 50))
		add(class, container(2, 30, -1), container(2, 300, -1))
	}
	refused := 0
	for _, p := range pods {
		_, err := createDry(ctx, cs, p)
		got, want := refusal(t, err), schedulerWords(p)
		if got != "" {
			refused++
		}
		if got != want {
			t.Errorf("pod %s (annotations %v, containers %v): the policy says %q, the scheduler %q",
				p.Name, p.Annotations, limitsOf(p), got, want)
		}
	}
	t.Logf("%d pods, %d refused by both", len(pods), refused)
}

func limitsOf(p *corev1.Pod) []string {
	var out []string
	for _, c := range p.Spec.Containers {
		var parts []string
		for k, v := range c.Resources.Limits {
			parts = append(parts, fmt.Sprintf("%s=%s", strings.TrimPrefix(k.String(), "tke.cloud.tencent.com/"), v.String()))
		}
		out = append(out, c.Name+":"+strings.Join(parts, ","))
	}
	return out
}
