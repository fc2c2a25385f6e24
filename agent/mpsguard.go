package agent

import (
	"context"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/mpsguard"
	"github.com/qgpu-scheduler/qgpu/agent/nodeconfig"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/agent/priority"
)

// startMPSGuard looks, while the node's backend is mps, for processes on
// an MPS-shared card that are not clients of its MPS server, and reports
// them or deletes their pods (--mps-foreign-process-policy,
// agent/mpsguard); nothing without --mps-root.
func (a *agent) startMPSGuard(ctx context.Context, driver *nvml.Driver, nodeCfg *nodeconfig.Config, nodePods cachedPods) {
	if a.cfg.MPSRoot == "" {
		return
	}
	logger := klog.FromContext(ctx)
	policy, err := mpsguard.ParsePolicy(a.cfg.MPSForeignProcessPolicy)
	if err != nil {
		logger.Error(err, "MPS guard off")
		return
	}
	devices, err := priority.DevicesByUUID(a.cfg.NVML)
	if err != nil {
		logger.Error(err, "MPS guard off: listing NVML devices")
		return
	}
	var cards []mpsguard.CardID
	for _, c := range driver.Cards() {
		cards = append(cards, mpsguard.CardID{Index: c.Index, UUID: c.UUID})
	}
	procRoot := a.cfg.ProcRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	procRoot = filepath.Clean(procRoot)
	g, err := mpsguard.New(mpsguard.Config{Node: a.cfg.NodeName, Root: a.cfg.MPSRoot, Cards: cards, Devices: devices,
		Active: func() bool { b, _, err := nodeCfg.Current(); return err == nil && b.Name() == enforce.NameMPS },
		Procs:  cgroup.Procs{Root: procRoot}, ProcRoot: procRoot, Pods: nodePods.Cached,
		Policy: policy, Delete: a.deletePod, Recorder: a.recorder, Observer: a.metrics.MPSGuard,
		Poll: a.cfg.MPSForeignProcessPoll})
	if err != nil {
		logger.Error(err, "MPS guard off")
		return
	}
	go g.Run(ctx)
}

// deletePod deletes a pod of the node, as the kubelet's evictions do
// rather than through the Eviction API: the agent's own-node admission
// policy (manifests/agent/own-node-policy.yaml) confines a delete to the
// pods bound to its node, which it cannot do for an Eviction, whose
// object is not the pod. The UID precondition spares a pod of the same
// name created since.
func (a *agent) deletePod(ctx context.Context, pod *v1.Pod) error {
	uid := pod.UID
	return a.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
}
