package sim

import (
	"math/rand"
	"testing"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

// Hand-computed from kube-scheduler's formulas (noderesources,
// least_allocated.go and balanced_allocation.go), requested including the
// pod.
func TestKubeDefaultScore(t *testing.T) {
	tests := []struct {
		name                               string
		cpuReq, cpuAlloc, memReq, memAlloc int64
		least, balanced                    int64
	}{
		// (6000·100)/8000 = 75, (3072·100)/4096 = 75; fractions equal.
		{"a quarter of both", 2000, 8000, 1024, 4096, 75, 100},
		// cpu (5000·100)/8000 = 62, memory (3096·100)/4096 = 75, mean
		// 137/2 = 68; fractions 0.375 and 0.2441: (1 − 0.0654)·100 = 93.
		{"truncated at every step", 3000, 8000, 1000, 4096, 68, 93},
		// cpu past its allocatable scores 0 and its fraction counts as 1.
		{"cpu overbooked", 9000, 8000, 0, 4096, 50, 50},
		// a resource of no allocatable is left out of both.
		{"no memory allocatable", 4000, 8000, 100, 0, 50, 100},
		{"empty node, empty pod", 0, 64000, 0, 262144, 100, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			la := LeastAllocated(tt.cpuReq, tt.cpuAlloc, tt.memReq, tt.memAlloc)
			ba := BalancedAllocation(tt.cpuReq, tt.cpuAlloc, tt.memReq, tt.memAlloc)
			if la != tt.least || ba != tt.balanced {
				t.Errorf("LeastAllocated %d, BalancedAllocation %d; want %d, %d", la, ba, tt.least, tt.balanced)
			}
			if got := KubeDefaultScore(tt.cpuReq, tt.cpuAlloc, tt.memReq, tt.memAlloc); got != la+ba {
				t.Errorf("KubeDefaultScore %d, want %d", got, la+ba)
			}
		})
	}
}

// kube-scheduler's default profile sends a CPU-only pod to the least
// allocated node that fits it, whatever the cards, and draws among equals.
func TestChooseDefault(t *testing.T) {
	nodes := []Node{
		{Name: "busy", CPUMilli: 64000, MemoryMiB: 262144, GPUs: 8, Model: "T4"},
		{Name: "idle-a", CPUMilli: 64000, MemoryMiB: 262144, GPUs: 8, Model: "T4"},
		{Name: "idle-b", CPUMilli: 64000, MemoryMiB: 262144, GPUs: 8, Model: "T4"},
		{Name: "small", CPUMilli: 2000, MemoryMiB: 262144, GPUs: 2, Model: "T4"},
	}
	pod := Pod{Name: "p", CPUMilli: 4000, MemoryMiB: 8192}
	picked := map[string]int{}
	for seed := range int64(40) {
		s := newSelector(newCluster(Paper, nodes), placement.FragFit, nil, []int{0, 1, 2, 3}, nil, FirstNode)
		s.kubeRng = rand.New(rand.NewSource(seed))
		s.cl.cpuLeft[0] -= 32000
		picked[nodes[s.chooseDefault(&pod)].Name]++
	}
	if picked["busy"]+picked["small"] > 0 || picked["idle-a"] == 0 || picked["idle-b"] == 0 {
		t.Errorf("picks over 40 seeds %v: want the two idle nodes only, both", picked)
	}
	s := newSelector(newCluster(Paper, nodes[3:]), placement.FragFit, nil, []int{0}, nil, FirstNode)
	s.kubeRng = rand.New(rand.NewSource(1))
	if n := s.chooseDefault(&pod); n != -1 {
		t.Errorf("a pod of 4000 CPU on a node of 2000: node %d, want none (-1)", n)
	}
}

// DefaultCPUPct picks that share of the CPU-only pods by name, never a
// pod with cards.
func TestByDefault(t *testing.T) {
	_, pods := load(t)
	for _, pct := range []int{0, 30, 100} {
		s := &selector{defaultPct: pct}
		var cpuOnly, picked int
		for i := range pods {
			if s.byDefault(&pods[i]) && pods[i].NumGPU > 0 {
				t.Fatalf("%d%%: pod %s with cards goes to the default profile", pct, pods[i].Name)
			}
			if pods[i].NumGPU == 0 {
				cpuOnly++
				if s.byDefault(&pods[i]) {
					picked++
				}
			}
		}
		if got := float64(picked) * 100 / float64(cpuOnly); got < float64(pct)-12 || got > float64(pct)+12 {
			t.Errorf("%d%%: %d of %d CPU-only pods (%.0f%%)", pct, picked, cpuOnly, got)
		}
	}
}
