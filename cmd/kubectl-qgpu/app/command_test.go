package app

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// run runs the command on a fake cluster holding objs, with the reactors
// of forbid answering Forbidden; it returns stdout, stderr, the API calls
// made and the error.
func run(t *testing.T, objs []runtime.Object, forbid []string, args ...string) (string, string, []k8stesting.Action, error) {
	t.Helper()
	cs := fake.NewClientset(objs...)
	for _, f := range forbid {
		verb, res, _ := strings.Cut(f, " ")
		// "list pods@team-b": in that namespace only; "list pods@": in all namespaces.
		resource, ns, scoped := strings.Cut(res, "@")
		cs.PrependReactor(verb, resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
			if scoped && a.GetNamespace() != ns {
				return false, nil, nil
			}
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", nil)
		})
	}
	var out, errOut bytes.Buffer
	cmd, o := newCommand(genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
	o.client = func() (kubernetes.Interface, error) { return cs, nil }
	o.now = func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errOut.String(), cs.Actions(), err
}

// schedulerConfigMap is the shipped ConfigMap with maxPodsPerCard set to n.
func schedulerConfigMap(n int) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "qgpu-system", Name: "qgpu-scheduler-config"},
		Data: map[string]string{"config.yaml": "profiles:\n- schedulerName: qgpu-scheduler\n  pluginConfig:\n  - name: QGPU\n    args:\n      maxPodsPerCard: " + string(rune('0'+n)) + "\n"}}
}

func cluster(t *testing.T) []runtime.Object {
	t.Helper()
	n1 := builders.GPUNode("n1", false, builders.Cards(1, "T4", 16<<10))
	n1.Labels["pool"] = "t4"
	a := bound(t, builders.GPUPod("a").Namespace("team-a").General("c", 4, 10), 4, 10)
	b := bound(t, builders.GPUPod("b").Namespace("team-b").General("c", 8, 20), 8, 20)
	b.Spec.Containers[0].Name = "c"
	return []runtime.Object{n1, builders.GPUNode("n2", false, builders.Cards(1, "V100", 32<<10)), &a, &b}
}

func TestNodesJSON(t *testing.T) {
	cases := []struct {
		name     string
		extra    []runtime.Object
		args     []string
		wantMax  int
		wantWarn string
	}{
		{"limit from the scheduler's ConfigMap", []runtime.Object{schedulerConfigMap(2)}, nil, 2, ""},
		{"no ConfigMap: the default rule, with a warning", nil, nil, 4, "Warning: pods per card: the default rule"},
		{"the flag overrides the ConfigMap", []runtime.Object{schedulerConfigMap(2)}, []string{"--max-pods-per-card=3"}, 3, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, _, err := run(t, append(cluster(t), tc.extra...), nil, append([]string{"nodes", "-o", "json", "-l", "pool=t4"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			var got NodeCardsList
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%v in %s", err, out)
			}
			want := NodeCardsList{TypeMeta: metav1.TypeMeta{APIVersion: "kubectl.qgpu.io/v1alpha1", Kind: "NodeCardsList"},
				Items: []NodeCards{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Cards: []Card{{
					Index: 0, UUID: "GPU-T4-00", Model: "T4", Healthy: true, MemoryGiB: 16, UsedMemoryGiB: 12, UsedCores: 30,
					MaxPods: tc.wantMax, Pods: PodCounts{General: 2}, Holders: []string{"team-a/a", "team-b/b"}}}}}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if tc.wantWarn == "" && errOut != "" || !strings.Contains(errOut, tc.wantWarn) {
				t.Errorf("stderr %q, want %q", errOut, tc.wantWarn)
			}
		})
	}
}

func TestNodesTable(t *testing.T) {
	objs := append(cluster(t), schedulerConfigMap(4))
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"default", []string{"nodes"}, `
NODE   CARD   MODEL   HEALTH   MEMORY(GIB)   CORES    GREEDY   PODS   HOLDERS
n1     0      T4      ok       12/16         30/100   0/100    2/4    team-a/a,team-b/b
n2     0      V100    ok       0/32          0/100    0/100    0/4    -
`},
		{"bars", []string{"nodes", "--bars", "--bar-width=4"}, `
NODE   CARD   MODEL   HEALTH   MEMORY(GIB)   CORES    GREEDY   PODS   MEMORY%     CORES%      HOLDERS
n1     0      T4      ok       12/16         30/100   0/100    2/4    ███░  75%   █░░░  30%   team-a/a,team-b/b
n2     0      V100    ok       0/32          0/100    0/100    0/4    ░░░░   0%   ░░░░   0%   -
`},
		{"wide, one node", []string{"nodes", "-o", "wide", "--node", "n2"}, `
NODE   CARD   MODEL   HEALTH   MEMORY(GIB)   CORES   GREEDY   PODS   HOLDERS   UUID
n2     0      V100    ok       0/32          0/100   0/100    0/4    -         GPU-V100-00
`},
		{"jsonpath", []string{"nodes", "-o", "jsonpath={.items[*].cards[*].usedMemoryGiB}"}, "\n12 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, _, _, err := run(t, objs, nil, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(strings.TrimPrefix(tc.want, "\n"), out); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// pods -n lists pods in that namespace and makes no other call: a user
// with the right to list pods there only is enough.
func TestPodsNamespaceScoped(t *testing.T) {
	forbidden := []string{"list nodes", "get nodes", "get configmaps", "list pods@team-b", "list pods@"}
	out, errOut, actions, err := run(t, cluster(t), forbidden, "pods", "-n", "team-a", "-o", "json")
	if err != nil {
		t.Fatalf("%v (stderr %s)", err, errOut)
	}
	var got PodSlicesList
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Items) != 1 || got.Items[0].Namespace != "team-a" || got.Items[0].Name != "a" || got.Kind != "PodSlicesList" {
		t.Errorf("got %+v, want team-a/a only", got)
	}
	want := []ContainerSlices{{Name: "c", Slices: []Slice{{Card: 0, UUID: "GPU-T4-00", MemoryGiB: 4, Cores: 10}}}}
	if diff := cmp.Diff(want, got.Items[0].Assigned); diff != "" {
		t.Errorf("assigned (-want +got):\n%s", diff)
	}
	for _, a := range actions {
		if a.GetVerb() != "list" || a.GetResource().Resource != "pods" || a.GetNamespace() != "team-a" {
			t.Errorf("call %s %s in %q: pods -n team-a may list pods in team-a only", a.GetVerb(), a.GetResource().Resource, a.GetNamespace())
		}
	}
}

func TestPodsOutputs(t *testing.T) {
	cases := []struct {
		name          string
		forbid        []string
		args          []string
		want, wantErr string
		stderr        string
	}{
		{"table", nil, []string{"pods", "-n", "team-a"}, `
NAME   CLASS     NODE   SLICES      GRANTED   PHASE     SUSPENDED   PROBLEM
a      general   n1     c:0=4G/10   -         Running   -           -
`, "", ""},
		{"all namespaces", nil, []string{"pods", "-A", "-l", "app!=x"}, `
NAMESPACE   NAME   CLASS     NODE   SLICES      GRANTED   PHASE     SUSPENDED   PROBLEM
team-a      a      general   n1     c:0=4G/10   -         Running   -           -
team-b      b      general   n1     c:0=8G/20   -         Running   -           -
`, "", ""},
		{"wide reads the card model", nil, []string{"pods", "-n", "team-a", "-o", "wide"}, `
NAME   CLASS     NODE   SLICES      GRANTED   PHASE     SUSPENDED   PROBLEM   MODEL   GRANTED-SLICES
a      general   n1     c:0=4G/10   -         Running   -           -         T4      -
`, "", ""},
		{"wide without node rights degrades", []string{"get nodes"}, []string{"pods", "-n", "team-a", "-o", "wide"}, `
NAME   CLASS     NODE   SLICES      GRANTED   PHASE     SUSPENDED   PROBLEM   MODEL   GRANTED-SLICES
a      general   n1     c:0=4G/10   -         Running   -           -         -       -
`, "", "Warning: the MODEL column is empty: reading node n1: forbidden for your credentials"},
		{"yaml", nil, []string{"pods", "-n", "team-a", "-o", "yaml"}, "", "", ""},
		{"jsonpath", nil, []string{"pods", "-A", "-o", "jsonpath={.items[*].metadata.name}"}, "a b", "", ""},
		{"--template alone is a go-template", nil, []string{"pods", "-A", "--template", "{{range .items}}{{.metadata.namespace}} {{end}}"}, "team-a team-b ", "", ""},
		{"empty namespace", nil, []string{"pods", "-n", "team-c"}, "", "", "No qGPU pods found in team-c namespace."},
		{"unknown -o", nil, []string{"pods", "-o", "tsv"}, "", "--output: unable to match a printer", ""},
		{"bad selector", nil, []string{"pods", "-l", "a=(b"}, "", `--selector: invalid value "a=(b"`, ""},
		{"-A without the right", []string{"list pods@"}, []string{"pods", "-A"}, "", "listing pods in all namespaces: forbidden for your credentials", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, _, err := run(t, cluster(t), tc.forbid, tc.args...)
			if wantError(t, err, tc.wantErr) {
				return
			}
			if tc.name == "yaml" {
				var l PodSlicesList
				if err := yaml.UnmarshalStrict([]byte(out), &l); err != nil || l.APIVersion != "kubectl.qgpu.io/v1alpha1" || len(l.Items) != 1 {
					t.Errorf("yaml %q: %v", out, err)
				}
			} else if diff := cmp.Diff(strings.TrimPrefix(tc.want, "\n"), out); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if !strings.Contains(errOut, tc.stderr) || tc.stderr == "" && errOut != "" {
				t.Errorf("stderr %q, want %q", errOut, tc.stderr)
			}
		})
	}
}

// wantError checks err against want, a part of the message ("" for no
// error), and says whether the case ends there (an error was wanted).
func wantError(t *testing.T, err error, want string) bool {
	t.Helper()
	if want != "" {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want %q", err, want)
		}
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}
