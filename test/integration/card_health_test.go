package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/agent/cardhealth"
	"github.com/qgpu-scheduler/qgpu/agent/dra"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestDRACardHealth: a hollow DRA node of two T4s, the real agent and
// qgpu-scheduler, through the real API server. A pod's claim is prepared
// on a card; the card goes unhealthy (the fake NVML's health file): the
// pod shows the condition qgpu.io/CardHealthy False naming the card, and a
// new claim, which the shipped policy would pack onto the same card, is
// allocated on the other one. With DRADeviceTaints on kube-apiserver the
// card stays in the node's ResourceSlice, tainted gpu.qgpu.io/unhealthy:NoSchedule;
// with it off (the default through 1.35) the agent finds the taint
// dropped, says so in a Node event, and leaves the card out. When the
// card recovers, the condition turns True and the card is published
// untainted. Without agent/cardhealth no condition appears (the test
// times out waiting for it).
func TestDRACardHealth(t *testing.T) {
	// Short names: the unix sockets live under the test's temporary directory.
	t.Run("taints on", func(t *testing.T) { checkCardHealth(t, true) })
	t.Run("taints off", func(t *testing.T) { checkCardHealth(t, false) })
}

// TestCardHealthDevicePlugins: the same on a node of the device-plugin
// mode: the pod granted a slice of the card shows the condition, a new
// pod is placed on the other card, and the condition turns True when the
// card recovers.
func TestCardHealthDevicePlugins(t *testing.T) {
	nodes, err := harness.ParseNodes("t4-0:2xT4")
	if err != nil {
		t.Fatal(err)
	}
	healthFile := filepath.Join(t.TempDir(), "unhealthy")
	c := harness.StartTestCluster(t, harness.ClusterOptions{Nodes: nodes, RBAC: true,
		AgentArgs: []string{"--health-interval=1s", "--fake-health-file=" + healthFile}})
	cs := c.Client
	first := builders.GPUPod("first").General("c", 4, 30).Obj()
	createPods(t, cs, first)
	_, a := waitBound(t, cs, "default", "first")
	e2eWaitGranted(t, cs, first)
	sick := a.Containers[0].Slices[0]
	if err := os.WriteFile(healthFile, []byte(sick.UUID+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cond := waitCardCondition(t, cs, "first", corev1.ConditionFalse)
	if cond.Reason != cardhealth.ReasonUnhealthy || !strings.Contains(cond.Message, sick.UUID) {
		t.Errorf("condition %+v: want reason %s naming card %s", cond, cardhealth.ReasonUnhealthy, sick.UUID)
	}
	second := builders.GPUPod("second").General("c", 4, 30).Obj()
	createPods(t, cs, second)
	if _, b := waitBound(t, cs, "default", "second"); b.Containers[0].Slices[0].UUID == sick.UUID {
		t.Errorf("pod second placed on the unhealthy card %s", sick.UUID)
	}
	if err := os.WriteFile(healthFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitCardCondition(t, cs, "first", corev1.ConditionTrue)
}

func checkCardHealth(t *testing.T, taints bool) {
	nodes, err := harness.ParseNodes("dra-0:2xT4:dra")
	if err != nil {
		t.Fatal(err)
	}
	healthFile := filepath.Join(t.TempDir(), "unhealthy")
	c := harness.StartTestCluster(t, harness.ClusterOptions{Nodes: nodes, RBAC: true,
		APIServerFlags: []string{fmt.Sprintf("--feature-gates=DRAConsumableCapacity=true,DRADeviceTaints=%v", taints)},
		AgentArgs:      []string{"--health-interval=1s", "--fake-health-file=" + healthFile}})
	ctx := context.Background()
	objs, err := harness.ReadManifests("manifests/dra")
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Apply(ctx, c.Config, objs, false); err != nil {
		t.Fatal(err)
	}
	cs := c.Client
	createClaims(t, cs, draClaim("first", protocol.ClassGeneral, 4, 30))
	createPods(t, cs, draPod("first", "first"))
	_, a := waitBound(t, cs, "default", "first")
	if err := waitForPodRunning(ctx, cs, "default", "first"); err != nil {
		t.Fatal(err)
	}
	sick := a.Containers[0].Slices[0]
	device := protocol.DRADeviceName(sick.Index)

	if err := os.WriteFile(healthFile, []byte(strconv.Itoa(sick.Index)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cond := waitCardCondition(t, cs, "first", corev1.ConditionFalse)
	if cond.Reason != cardhealth.ReasonUnhealthy || !strings.Contains(cond.Message, sick.UUID) || !strings.Contains(cond.Message, "NVML") {
		t.Errorf("condition %+v: want reason %s naming card %s and NVML's finding", cond, cardhealth.ReasonUnhealthy, sick.UUID)
	}
	waitClaimDeviceCondition(t, cs, "first", device, metav1.ConditionFalse)
	if taints {
		waitSlice(t, cs, "dra-0", deviceTainted(device, true))
	} else {
		waitNodeEvent(t, cs, "dra-0", dra.ReasonTaintsDropped, dra.TaintsGate)
		waitSlice(t, cs, "dra-0", func(devices []resourceapi.Device) error {
			for _, d := range devices {
				if d.Name == device {
					return fmt.Errorf("unhealthy %s still published (taints %v)", device, d.Taints)
				}
			}
			if len(devices) != 1 {
				return fmt.Errorf("%d devices, want the healthy card's", len(devices))
			}
			return nil
		})
	}

	createClaims(t, cs, draClaim("second", protocol.ClassGeneral, 4, 30))
	createPods(t, cs, draPod("second", "second"))
	waitBound(t, cs, "default", "second")
	if got := allocatedClaim(t, cs, "second").Status.Allocation.Devices.Results[0].Device; got == device {
		t.Errorf("claim second allocated on the unhealthy %s", device)
	}

	if err := os.WriteFile(healthFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if cond := waitCardCondition(t, cs, "first", corev1.ConditionTrue); cond.Reason != cardhealth.ReasonHealthy {
		t.Errorf("condition %+v after the recovery: want reason %s", cond, cardhealth.ReasonHealthy)
	}
	waitClaimDeviceCondition(t, cs, "first", device, metav1.ConditionTrue)
	if taints {
		waitSlice(t, cs, "dra-0", deviceTainted(device, false))
	}
}

// waitCardCondition waits for pod's condition qgpu.io/CardHealthy to have status.
func waitCardCondition(t *testing.T, cs kubernetes.Interface, pod string, status corev1.ConditionStatus) corev1.PodCondition {
	t.Helper()
	var got corev1.PodCondition
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, agentWait, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == cardhealth.ConditionType {
				got = c
			}
		}
		return got.Status == status, nil
	})
	if err != nil {
		t.Fatalf("pod %s: condition %s is %+v, want status %s", pod, cardhealth.ConditionType, got, status)
	}
	return got
}

// deviceTainted checks that the node publishes device with (or without)
// the agent's unhealthy taint.
func deviceTainted(device string, tainted bool) func([]resourceapi.Device) error {
	return func(devices []resourceapi.Device) error {
		for _, d := range devices {
			if d.Name != device {
				continue
			}
			has := len(d.Taints) == 1 && d.Taints[0].Key == protocol.DRATaintUnhealthy && d.Taints[0].Effect == resourceapi.DeviceTaintEffectNoSchedule
			if has != tainted || (!tainted && len(d.Taints) > 0) {
				return fmt.Errorf("%s taints %+v, want tainted %v", device, d.Taints, tainted)
			}
			return nil
		}
		return fmt.Errorf("%s not published", device)
	}
}

// waitClaimDeviceCondition waits for the claim's status.devices entry of
// device to carry the agent's condition with status.
func waitClaimDeviceCondition(t *testing.T, cs kubernetes.Interface, claim, device string, status metav1.ConditionStatus) {
	t.Helper()
	var got []resourceapi.AllocatedDeviceStatus
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, agentWait, true, func(ctx context.Context) (bool, error) {
		c, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = c.Status.Devices
		for _, d := range got {
			if d.Driver != protocol.DRADriver || d.Device != device {
				continue
			}
			for _, cond := range d.Conditions {
				if cond.Type == dra.DeviceCondition && cond.Status == status {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("claim %s: status.devices %+v, want %s's condition %s %s", claim, got, device, dra.DeviceCondition, status)
	}
}
