package sim

import (
	"fmt"
	"math"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

// kubeMaxScore is kube-scheduler's MaxNodeScore.
const kubeMaxScore = 100

// LeastAllocated is kube-scheduler's NodeResourcesFit score under its
// default LeastAllocated strategy on cpu and memory, each of weight 1
// (pkg/scheduler/framework/plugins/noderesources, least_allocated.go):
// per resource ((allocatable − requested) × 100) / allocatable in integers,
// 0 when the request passes the allocatable; the weighted mean, truncated.
// requested includes the pod being scored.
func LeastAllocated(cpuReq, cpuAlloc, memReq, memAlloc int64) int64 {
	var sum, weights int64
	for _, r := range [][2]int64{{cpuReq, cpuAlloc}, {memReq, memAlloc}} {
		if r[1] == 0 {
			continue
		}
		if r[0] <= r[1] {
			sum += (r[1] - r[0]) * kubeMaxScore / r[1]
		}
		weights++
	}
	if weights == 0 {
		return 0
	}
	return sum / weights
}

// BalancedAllocation is kube-scheduler's NodeResourcesBalancedAllocation
// score on its default resources, cpu and memory (balanced_allocation.go):
// with each resource's requested fraction capped at 1, (1 − |f_cpu −
// f_mem| / 2) × 100, truncated (the standard deviation of two fractions
// is half their difference).
func BalancedAllocation(cpuReq, cpuAlloc, memReq, memAlloc int64) int64 {
	var fractions []float64
	for _, r := range [][2]int64{{cpuReq, cpuAlloc}, {memReq, memAlloc}} {
		if r[1] != 0 {
			fractions = append(fractions, min(float64(r[0])/float64(r[1]), 1))
		}
	}
	std := 0.0
	if len(fractions) == 2 {
		std = math.Abs((fractions[0] - fractions[1]) / 2)
	}
	return int64((1 - std) * kubeMaxScore)
}

// KubeDefaultScore is what kube-scheduler's default profile scores a node
// by for a pod of the trace, which has no affinity, toleration, spread
// constraint or image to tell nodes apart: NodeResourcesFit
// (LeastAllocated) plus NodeResourcesBalancedAllocation, each of weight 1
// (apis/config/v1/default_plugins.go). The other default score plugins
// give every node the same score for such a pod.
func KubeDefaultScore(cpuReq, cpuAlloc, memReq, memAlloc int64) int64 {
	return LeastAllocated(cpuReq, cpuAlloc, memReq, memAlloc) + BalancedAllocation(cpuReq, cpuAlloc, memReq, memAlloc)
}

// ValidateDefaultCPUPct checks the share of CPU-only pods kube-scheduler's
// default profile places (Config.DefaultCPUPct).
func ValidateDefaultCPUPct(pct int) error {
	if pct < 0 || pct > 100 {
		return fmt.Errorf("default-cpu-pods %d: want a percentage 0..100", pct)
	}
	return nil
}

// byDefault reports whether kube-scheduler's default profile, not the
// policy under test, places the pod: DefaultCPUPct of the CPU-only pods,
// chosen by a hash of the name (the same pods for every seed and policy).
func (s *selector) byDefault(pod *Pod) bool {
	return s.defaultPct > 0 && pod.NumGPU == 0 && int(placement.NameHash(pod.Name)%100) < s.defaultPct
}

// chooseDefault is the node kube-scheduler's default profile picks for the
// pod (-1 if none fits its CPU and memory): the best KubeDefaultScore,
// ties at random (selectHost's reservoir sampling, seeded). It scores
// every node; kube-scheduler's adaptive percentageOfNodesToScore, under
// which on the trace's 1213 nodes it stops filtering once it has found
// 497 feasible nodes (41 %), starting where the last cycle stopped, is
// not modelled.
func (s *selector) chooseDefault(pod *Pod) int {
	best, bestScore, ties := -1, int64(-1), 0
	for i := range s.cl.nodes {
		if s.cl.cpuLeft[i] < pod.CPUMilli || s.cl.memLeft[i] < pod.MemoryMiB {
			continue
		}
		n := &s.cl.nodes[i]
		score := KubeDefaultScore(n.CPUMilli-s.cl.cpuLeft[i]+pod.CPUMilli, n.CPUMilli, n.MemoryMiB-s.cl.memLeft[i]+pod.MemoryMiB, n.MemoryMiB)
		switch {
		case score > bestScore:
			best, bestScore, ties = i, score, 1
		case score == bestScore:
			ties++
			if s.kubeRng.Intn(ties) == 0 {
				best = i
			}
		}
	}
	return best
}
