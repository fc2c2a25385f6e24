package app

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/quota"
	"github.com/qgpu-scheduler/qgpu/test/builders"
)

// The table commands take kubectl get's printing flags: -o name,
// --no-headers and --sort-by, over the list -o json prints.
func TestPrintingFlags(t *testing.T) {
	small := bound(t, builders.GPUPod("c").Namespace("team-a").General("c", 2, 5), 2, 5)
	quotas := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: quota.ConfigMapNamespace, Name: quota.ConfigMapName},
		Data: map[string]string{"team-a": "T4: {cards: 0.1, memoryGiB: 10}\nV100: {cards: 1}", "team-b": "\"*\": {memoryGiB: 6}"}}
	objs := append(cluster(t), &small, quotas, schedulerConfigMap(4))
	cases := []struct {
		name          string
		args          []string
		want, wantErr string
	}{
		{"nodes -o name", []string{"nodes", "-o", "name"}, "node/n1\nnode/n2\n", ""},
		{"pods -o name", []string{"pods", "-n", "team-a", "-o", "name"}, "pod/a\npod/c\n", ""},
		{"quota -o name: each namespace once", []string{"quota", "-A", "-o", "name"}, "namespace/team-a\nnamespace/team-b\n", ""},
		{"nodes --no-headers", []string{"nodes", "--no-headers"}, `
n1    0     T4     ok    14/16   35/100   0/100   3/4   team-a/a,team-a/c,team-b/b
n2    0     V100   ok    0/32    0/100    0/100   0/4   -
`, ""},
		{"pods --no-headers -o wide", []string{"pods", "-n", "team-a", "--no-headers", "-o", "wide"}, `
a     general   n1    c:0=4G/10   -     Running   -     -     T4    -
c     general   n1    c:0=2G/5    -     Running   -     -     T4    -
`, ""},
		{"nodes by a JSONPath in braces", []string{"nodes", "--sort-by", "{.cards[0].usedMemoryGiB}", "-o", "name"}, "node/n2\nnode/n1\n", ""},
		{"pods by a field name, the table follows", []string{"pods", "-A", "--sort-by", "assigned[0].slices[0].cores", "--no-headers"}, `
team-a   c     general   n1    c:0=2G/5    -     Running   -     -
team-a   a     general   n1    c:0=4G/10   -     Running   -     -
team-b   b     general   n1    c:0=8G/20   -     Running   -     -
`, ""},
		{"pods by name, -o name", []string{"pods", "-A", "--sort-by", ".metadata.name", "-o", "name"}, "pod/a\npod/b\npod/c\n", ""},
		{"json is sorted too", []string{"pods", "-A", "--sort-by", ".assigned[0].slices[0].memoryGiB", "-o", "jsonpath={.items[*].metadata.name}"}, "c a b", ""},
		{"quota by memory used", []string{"quota", "-A", "--sort-by", "memoryGiBUsed", "-o", "jsonpath={range .items[*]}{.namespace}/{.model} {end}"}, "team-a/V100 team-a/T4 team-b/* ", ""},
		{"a field no item has", []string{"nodes", "--sort-by", ".spec.nothing"}, "", "--sort-by: no item has a field .spec.nothing"},
		{"a field that is a list", []string{"nodes", "--sort-by", ".cards"}, "", "--sort-by .cards: values are lists or objects"},
		{"a bad path, before any call", []string{"pods", "--sort-by", "{.items[}"}, "", `--sort-by: invalid value "{.items[}"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, _, _, err := run(t, objs, nil, tc.args...)
			if wantError(t, err, tc.wantErr) {
				return
			}
			if strings.HasPrefix(tc.want, "\n") {
				// Tables: compare the cells, not the padding.
				if diff := cmp.Diff(strings.Fields(tc.want), strings.Fields(out)); diff != "" {
					t.Errorf("(-want +got):\n%s\ngot:\n%s", diff, out)
				}
				if strings.Contains(out, "NAME") {
					t.Errorf("headers printed:\n%s", out)
				}
				return
			}
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
