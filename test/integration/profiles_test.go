package integration

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// Regression (issue 13, case 4): one scheduler binary with two profiles that
// both enable QGPU, binpack and spread, against a real apiserver. Two 14 GiB
// cards, three 8 GiB pods in turn: binpack, spread, binpack. With one ledger,
// the first two take one card each and the third cannot fit; with a ledger
// per profile, the binpack profile does not see the spread profile's pod and
// puts its second pod on the card that pod holds (16 GiB on a 14 GiB card).
func TestTwoQGPUProfilesShareTheCards(t *testing.T) {
	cp := harness.Start(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(filepath.Join(root, "config/qgpu-scheduler.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := harness.WithSpreadProfile(string(base), "team-spread")
	if err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(t.TempDir(), "two-profiles.yaml")
	if err := os.WriteFile(profile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	harness.StartQGPUScheduler(t, cp, profile)
	cs := cp.Client
	createNodes(t, cs, builders.GPUNode("t4", false, builders.Cards(2, "Tesla-T4", t4MiB)))
	pods := []*corev1.Pod{
		builders.GPUPod("binpack-1").General("c", 8, 20).Obj(),
		builders.GPUPod("spread-1").General("c", 8, 20).Obj(),
		builders.GPUPod("binpack-2").General("c", 8, 20).Obj(),
	}
	pods[1].Spec.SchedulerName = "team-spread"
	for _, p := range pods[:2] {
		createPods(t, cs, p)
		waitBound(t, cs, p.Namespace, p.Name)
	}
	createPods(t, cs, pods[2])
	waitFailedScheduling(t, cs, pods[2].Namespace, pods[2].Name)
	checkCluster(t, cs)
}
