package qgpu

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

// podCPU is the pod's CPU request in milli-cores, as the scheduler counts it.
func podCPU(pod *v1.Pod) int64 {
	var cpu int64
	for i := range pod.Spec.Containers {
		cpu += pod.Spec.Containers[i].Resources.Requests.Cpu().MilliValue()
	}
	return cpu
}

// env is what the policies see of a node besides its cards; nothing for
// binpack and spread, which do not look (reading the NodeInfo costs cache
// misses on every node scored).
func (p *QGPU) env(s *cycleState, ni fwk.NodeInfo) placement.Env {
	if !p.nodePolicy.UsesEnv() && !p.cardPolicy.UsesEnv() {
		return placement.Env{}
	}
	e := placement.Env{Workload: p.workload.Load(), PodCPU: s.podCPU}
	if ni != nil && ni.Node() != nil {
		e.CPUCap = ni.GetAllocatable().GetMilliCPU()
		e.CPULeft = e.CPUCap - ni.GetRequested().GetMilliCPU()
		e.Rank = placement.NodeRank(ni.Node().Name)
	}
	return e
}

// learnCPUOnly counts a pod without qGPU requests (uid, its CPU request in
// milli-cores) bound to node in the workload, once, when the node has qGPU
// cards: the workload the policies leave room for is what competes for
// those nodes' CPU and cards, whoever placed it. Reserve calls it for the
// pods this scheduler places, the pod informer for those other schedulers
// bind (learn.go).
func (s *shared) learnCPUOnly(uid types.UID, node string, cpu int64) {
	if s.ledger.HasCards(node) {
		s.workload.ObservePod(uid, nil, cpu)
	}
}
