package app

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// schedulerDeploymentMounting is the scheduler's Deployment mounting the
// ConfigMap name.
func schedulerDeploymentMounting(name string) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "qgpu-system", Name: "qgpu-scheduler"}}
	d.Spec.Template.Spec.Volumes = []v1.Volume{{Name: "config", VolumeSource: v1.VolumeSource{
		ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: name}}}}}
	return d
}

// hashed is schedulerConfigMap(n) under the name kustomize generates.
func hashed(n int, name string) *v1.ConfigMap {
	cm := schedulerConfigMap(n)
	cm.Name = name
	return cm
}

// The shipped manifests generate the configuration with a hash suffix;
// kubectl qgpu reads the one the scheduler's Deployment mounts (an old
// one left beside it by a rollout is not), and the fixed name only where
// there is no such Deployment.
func TestMaxPodsPerCardFromTheMountedConfig(t *testing.T) {
	cases := []struct {
		name     string
		objs     []runtime.Object
		args     []string
		want     int
		warnings string
	}{
		{"the mounted hashed ConfigMap", []runtime.Object{hashed(3, "qgpu-scheduler-config-old1"), hashed(2, "qgpu-scheduler-config-k4t449g9mm"), schedulerDeploymentMounting("qgpu-scheduler-config-k4t449g9mm")}, nil, 2, ""},
		{"no Deployment: the fixed name", []runtime.Object{schedulerConfigMap(5)}, nil, 5, ""},
		{"an explicit name is read as written", []runtime.Object{hashed(2, "qgpu-scheduler-config-k4t449g9mm"), schedulerDeploymentMounting("qgpu-scheduler-config-k4t449g9mm"), hashed(4, "mine")}, []string{"--scheduler-config=qgpu-system/mine"}, 4, ""},
		{"mounted but missing", []runtime.Object{schedulerDeploymentMounting("qgpu-scheduler-config-gone")}, nil, 4, "qgpu-system/qgpu-scheduler-config-gone"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, warnings := podsPerCardOf(t, c.objs, c.args)
			if got != c.want {
				t.Errorf("pods per card %d, want %d (stderr %q)", got, c.want, warnings)
			}
			if c.warnings == "" && warnings != "" || !strings.Contains(warnings, c.warnings) {
				t.Errorf("stderr %q, want it to name %q", warnings, c.warnings)
			}
		})
	}
}

// podsPerCardOf runs `kubectl qgpu nodes -o json` over the test cluster
// plus objs and returns the pods-per-card limit it shows, and stderr.
func podsPerCardOf(t *testing.T, objs []runtime.Object, args []string) (int, string) {
	t.Helper()
	out, errOut, _, err := run(t, append(cluster(t), objs...), nil, append([]string{"nodes", "-o", "json", "-l", "pool=t4"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var got NodeCardsList
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Items) != 1 || len(got.Items[0].Cards) != 1 {
		t.Fatalf("%v in %s", err, out)
	}
	return got.Items[0].Cards[0].MaxPods, errOut
}
