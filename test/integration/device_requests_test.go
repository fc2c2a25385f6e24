package integration

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/test/builders"
)

const deviceRequestsPolicy = "qgpu-device-requests"

// plainPod is a pod of ns asking for nothing, one container "c".
func plainPod(ns, name string) *corev1.Pod {
	return builders.GPUPod(name).Namespace(ns).Container("c", nil).Obj()
}

// mountAt adds an emptyDir "devs" mounted at path in the pod's first
// container (or a new init container "init").
func mountAt(p *corev1.Pod, path string, init bool) *corev1.Pod {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "devs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	m := corev1.VolumeMount{Name: "devs", MountPath: path}
	if init {
		c := *p.Spec.Containers[0].DeepCopy()
		c.Name, c.VolumeMounts = "init", []corev1.VolumeMount{m}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		return p
	}
	p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, m)
	return p
}

// TestTenantDeviceRequests: a tenant's pod may not name devices for the
// container runtime itself, beside the slice qGPU accounts for. A volume
// mounted under /var/run/nvidia-container-devices (NVIDIA's runtime with
// accept-nvidia-visible-devices-as-volume-mounts reads the mount paths as
// the cards to inject) and a pod annotation of CDI's prefix are refused
// by qgpu-device-requests, at creation and when added later (annotations
// by update, an ephemeral container through its subresource), in every
// kind of container; ordinary volumes and annotations pass, and so does
// everything in the namespace the administrator labelled.
func TestTenantDeviceRequests(t *testing.T) {
	cp, tenant := startTenantCluster(t)
	ctx := context.Background()
	const devices = "/var/run/nvidia-container-devices"
	pod := func(name string) *corev1.Pod { return plainPod(tenantNamespace, name) }
	annotate := func(p *corev1.Pod, k string) *corev1.Pod {
		p.Annotations[k] = "nvidia.com/gpu=all"
		return p
	}
	waitRefusedBy(t, tenant, mountAt(pod("probe"), devices+"/all", false), deviceRequestsPolicy)

	cases := []struct {
		name string
		pod  *corev1.Pod
		want string // a prefix of the refusal; "" admitted
	}{
		{"every card by mount", mountAt(pod("all"), devices+"/all", false), "containers[c]: volume devs at " + devices + "/all: "},
		{"the directory itself", mountAt(pod("dir"), devices, false), "containers[c]: volume devs at " + devices + ": "},
		{"a CDI device by mount", mountAt(pod("cdi-mount"), devices+"/cdi/nvidia.com/gpu/all", false), "containers[c]: volume devs at " + devices + "/cdi/nvidia.com/gpu/all: "},
		{"through /run", mountAt(pod("run"), "/run/nvidia-container-devices/all", false), "containers[c]: volume devs at /run/nvidia-container-devices/all: "},
		{"an unclean path", mountAt(pod("unclean"), "/var/run//nvidia-container-devices/./all", false), "containers[c]: volume devs at /var/run//nvidia-container-devices/./all: "},
		{"in an init container", mountAt(pod("init"), devices+"/GPU-0", true), "initContainers[init]: volume devs at " + devices + "/GPU-0: "},
		{"a CDI annotation", annotate(pod("cdi"), "cdi.k8s.io/all"), "annotation cdi.k8s.io/all: "},
		{"NVIDIA's CDI annotation prefix", annotate(pod("nvidia-cdi"), "nvidia.cdi.k8s.io/all"), "annotation nvidia.cdi.k8s.io/all: "},
		{"an ordinary volume", mountAt(pod("data"), "/data", false), ""},
		{"an ordinary annotation", annotate(pod("ordinary"), "example.com/cdi.k8s.io"), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := createDry(ctx, tenant, c.pod)
			checkRefusal(t, err, deviceRequestsPolicy, c.want)
		})
	}

	stored := mountAt(pod("stored"), "/data", false) // volume devs, which an ephemeral container may mount too
	stored.UID = ""
	stored, err := tenant.CoreV1().Pods(tenantNamespace).Create(ctx, stored, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a CDI annotation added by update", func(t *testing.T) {
		patch := []byte(`{"metadata":{"annotations":{"cdi.k8s.io/late":"nvidia.com/gpu=all"}}}`)
		_, err := tenant.CoreV1().Pods(tenantNamespace).Patch(ctx, stored.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		checkRefusal(t, err, deviceRequestsPolicy, "annotation cdi.k8s.io/late: ")
	})
	t.Run("an ordinary update", func(t *testing.T) {
		patch := []byte(`{"metadata":{"labels":{"example.com/tier":"batch"}}}`)
		_, err := tenant.CoreV1().Pods(tenantNamespace).Patch(ctx, stored.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		checkRefusal(t, err, deviceRequestsPolicy, "")
	})
	t.Run("an ephemeral container's mount", func(t *testing.T) {
		// Ephemeral containers are a subresource the tenant has no rights
		// to: the administrator, to whom the policy applies all the same.
		debug := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "registry.k8s.io/pause:3.10",
			VolumeMounts: []corev1.VolumeMount{{Name: "devs", MountPath: devices + "/all"}}}}
		cur, err := cp.Client.CoreV1().Pods(tenantNamespace).Get(ctx, stored.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.EphemeralContainers = append(cur.Spec.EphemeralContainers, debug)
		_, err = cp.Client.CoreV1().Pods(tenantNamespace).UpdateEphemeralContainers(ctx, cur.Name, cur, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		checkRefusal(t, err, deviceRequestsPolicy, "ephemeralContainers[debug]: volume devs at "+devices+"/all: ")
	})
	t.Run("the administrator's namespace label exempts", func(t *testing.T) {
		for _, p := range []*corev1.Pod{
			mountAt(plainPod(optedOutNamespace, "all"), devices+"/all", false),
			annotate(plainPod(optedOutNamespace, "cdi"), "cdi.k8s.io/all"),
		} {
			if _, err := createDry(ctx, cp.Client, p); err != nil {
				t.Errorf("pod %s in %s: %v", p.Name, optedOutNamespace, err)
			}
		}
	})
}
