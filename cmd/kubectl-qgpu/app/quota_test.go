package app

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/quota"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

func quotaObjs(t *testing.T, data map[string]string) []runtime.Object {
	t.Helper()
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: quota.ConfigMapNamespace, Name: quota.ConfigMapName}, Data: data}
	ended := bound(t, builders.GPUPod("ended").Namespace("team-a").General("c", 2, 50), 2, 50)
	ended.Status.Phase = v1.PodSucceeded
	return append(cluster(t), cm, &ended)
}

// cluster(t) holds team-a/a (4 GiB, 10 cores) and team-b/b (8 GiB, 20
// cores) on n1's T4; a pod that ended holds nothing.
func TestQuotaTable(t *testing.T) {
	objs := quotaObjs(t, map[string]string{
		"team-a": "T4: {cards: 0.1, memoryGiB: 10}\nV100: {cards: 1}",
		"team-b": "\"*\": {memoryGiB: 6}",
		"team-c": "T4: {cards: -1}",
	})
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"namespace", []string{"quota", "-n", "team-a"}, `
NAMESPACE   MODEL   CARDS   MEMORY(GIB)   STATUS
team-a      T4      0.1/0.1 4/10          full
team-a      V100    0/1     0/-           ok
`},
		{"all", []string{"quota", "-A"}, `
NAMESPACE   MODEL   CARDS   MEMORY(GIB)   STATUS
team-a      T4      0.1/0.1 4/10          full
team-a      V100    0/1     0/-           ok
team-b      *       0.2/-   8/6           over
team-c      -       -       -             INVALID (scheduler keeps the last valid limits, or closes the namespace): data[team-c].T4.cards: value -1 must be a number of cards between 0 and 1099511627776 with at most two decimals
`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _, _, err := run(t, objs, nil, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(strings.Fields(c.want), strings.Fields(out)); diff != "" {
				t.Errorf("table (-want +got):\n%s\ngot:\n%s", diff, out)
			}
		})
	}
}

func TestQuotaJSON(t *testing.T) {
	out, _, _, err := run(t, quotaObjs(t, map[string]string{"team-b": "T4: {cards: 1.5}"}), nil, "quota", "-A", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got QuotaUsageList
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	want := QuotaUsageList{TypeMeta: metav1.TypeMeta{APIVersion: "kubectl.qgpu.io/v1alpha1", Kind: "QuotaUsageList"},
		Items: []QuotaUsage{{Namespace: "team-b", Model: "T4", CoresUsed: 20, CoresLimit: ptr.To[int64](150), MemoryGiBUsed: 8}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestQuotaWithoutConfigMap(t *testing.T) {
	_, errOut, _, err := run(t, cluster(t), nil, "quota", "-A")
	if err != nil || !strings.Contains(errOut, "No qGPU quota found.") {
		t.Fatalf("err %v, stderr %q", err, errOut)
	}
}

// DeepCopyObject copies the limits' pointers: changing the copy leaves the original.
func TestQuotaDeepCopy(t *testing.T) {
	l := &QuotaUsageList{Items: []QuotaUsage{{Namespace: "a", CoresLimit: ptr.To[int64](100), MemoryGiBLimit: ptr.To[int64](8)}}}
	c := l.DeepCopyObject().(*QuotaUsageList)
	if diff := cmp.Diff(l, c); diff != "" {
		t.Errorf("copy differs (-orig +copy):\n%s", diff)
	}
	*c.Items[0].CoresLimit, *c.Items[0].MemoryGiBLimit, c.Items[0].Namespace = 1, 1, "b"
	if *l.Items[0].CoresLimit != 100 || *l.Items[0].MemoryGiBLimit != 8 || l.Items[0].Namespace != "a" {
		t.Error("changing the copy changed the original")
	}
}

// Installed into another namespace (docs/install.md#another-namespace),
// the limits are read from that namespace's qgpu-quota, named through
// --scheduler-config as for the pods-per-card limit.
func TestQuotaOfAnotherNamespace(t *testing.T) {
	objs := quotaObjs(t, map[string]string{"team-a": "T4: {memoryGiB: 99}"})
	mine := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-infra", Name: quota.ConfigMapName},
		Data: map[string]string{"team-a": "T4: {memoryGiB: 10}"}}
	out, _, _, err := run(t, append(objs, mine), nil, "quota", "-n", "team-a", "-o", "json", "--scheduler-config=gpu-infra/qgpu-scheduler-config")
	if err != nil {
		t.Fatal(err)
	}
	var got QuotaUsageList
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Items) != 1 {
		t.Fatalf("%v in %s", err, out)
	}
	if l := got.Items[0].MemoryGiBLimit; l == nil || *l != 10 {
		t.Errorf("limit %v, want gpu-infra's 10 GiB:\n%s", l, out)
	}
	if _, _, _, err := run(t, objs, nil, "quota", "--scheduler-config=nonsense"); err == nil || !strings.Contains(err.Error(), `--scheduler-config: invalid value "nonsense"`) {
		t.Errorf("a --scheduler-config without a namespace: %v", err)
	}
}
