package ledger

import (
	"testing"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

const (
	general = protocol.ClassGeneral
	online  = protocol.ClassOnline
	offline = protocol.ClassOffline
)

// card is a healthy 32 GiB card with the default of 8 pods (memory / 4).
func card() Card {
	return Card{Index: 0, UUID: "GPU-0", Model: "Tesla V100", MemoryGiB: 32, Healthy: true, MaxPods: DefaultMaxPods(32)}
}

// holding returns card() after the given takes, each a new pod.
func holding(takes ...take) Card {
	c := card()
	for _, t := range takes {
		c.Take(t.class, t.mem, t.cores, true)
	}
	return c
}

type take struct {
	class      protocol.Class
	mem, cores int64
}

func TestFits(t *testing.T) {
	unhealthy := card()
	unhealthy.Healthy = false
	twoPods := card()
	twoPods.MaxPods = 2
	twoPods.Take(general, 1, 1, true)
	twoPods.Take(general, 1, 1, true)

	tests := []struct {
		name   string
		card   Card
		class  protocol.Class
		mem    int64
		cores  int64
		newPod bool
		want   bool
	}{
		// Memory is hard for every class.
		{"general all memory", card(), general, 32, 10, true, true},
		{"general memory over", card(), general, 33, 10, true, false},
		{"general memory over after others", holding(take{general, 30, 10}), general, 3, 10, true, false},
		{"online all memory", card(), online, 32, 0, true, true},
		{"online memory over", holding(take{online, 16, 0}), online, 17, 0, true, false},
		{"offline memory over", holding(take{offline, 16, 50}), offline, 17, 10, true, false},
		{"offline memory over online's", holding(take{online, 30, 0}), offline, 3, 10, true, false},
		// General cores ≤ 100.
		{"general cores to 100", holding(take{general, 1, 60}), general, 1, 40, true, true},
		{"general cores over 100", holding(take{general, 1, 60}), general, 1, 41, true, false},
		{"general whole card on empty card", card(), general, 16, 100, true, true},
		{"general whole card on shared card", holding(take{general, 1, 1}), general, 16, 100, true, false},
		{"general after whole card", holding(take{general, 1, 100}), general, 1, 1, true, false},
		// Online pods hold no core budget.
		{"online beside offline greedy 100", holding(take{offline, 1, 100}), online, 1, 0, true, true},
		{"online beside online", holding(take{online, 1, 0}, take{online, 1, 0}), online, 1, 0, true, true},
		// Offline greedy ≤ 100 among offline pods.
		{"offline greedy to 100", holding(take{offline, 1, 70}), offline, 1, 30, true, true},
		{"offline greedy over 100", holding(take{offline, 1, 70}), offline, 1, 31, true, false},
		{"offline greedy 100 beside online", holding(take{online, 8, 0}), offline, 1, 100, true, true},
		// General never with online/offline on one card.
		{"general on online card", holding(take{online, 1, 0}), general, 1, 1, true, false},
		{"general on offline card", holding(take{offline, 1, 1}), general, 1, 1, true, false},
		{"online on general card", holding(take{general, 1, 1}), online, 1, 0, true, false},
		{"offline on general card", holding(take{general, 1, 1}), offline, 1, 1, true, false},
		// maxPodsPerCard.
		{"eighth pod fits", holding(take{general, 1, 1}, take{general, 1, 1}, take{general, 1, 1}, take{general, 1, 1},
			take{general, 1, 1}, take{general, 1, 1}, take{general, 1, 1}), general, 1, 1, true, true},
		{"ninth pod does not", holding(take{general, 1, 1}, take{general, 1, 1}, take{general, 1, 1}, take{general, 1, 1},
			take{general, 1, 1}, take{general, 1, 1}, take{general, 1, 1}, take{general, 1, 1}), general, 1, 1, true, false},
		{"ninth online pod does not", holding(take{online, 1, 0}, take{online, 1, 0}, take{online, 1, 0}, take{online, 1, 0},
			take{offline, 1, 1}, take{offline, 1, 1}, take{offline, 1, 1}, take{offline, 1, 1}), online, 1, 0, true, false},
		{"override limit reached", twoPods, general, 1, 1, true, false},
		{"second container of a pod already here", twoPods, general, 1, 1, false, true},
		// Unhealthy cards take nothing.
		{"unhealthy", unhealthy, general, 1, 1, true, false},
		{"unhealthy online", unhealthy, online, 1, 0, true, false},
		{"unknown class", card(), protocol.Class("batch"), 1, 1, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.card
			if got := c.Fits(tt.class, tt.mem, tt.cores, tt.newPod); got != tt.want {
				t.Errorf("Fits(%s, %d GiB, %d cores, new=%v) on %+v = %v, want %v", tt.class, tt.mem, tt.cores, tt.newPod, c, got, tt.want)
			}
		})
	}
}

func TestDefaultMaxPods(t *testing.T) {
	for _, tt := range []struct {
		gib  int64
		want int
	}{{32, 8}, {16, 4}, {15, 3}, {24, 6}, {80, 20}, {4, 1}, {3, 1}, {1, 1}, {0, 1}} {
		if got := DefaultMaxPods(tt.gib); got != tt.want {
			t.Errorf("DefaultMaxPods(%d) = %d, want %d", tt.gib, got, tt.want)
		}
	}
}

// Regression (issue 13, case 6): the rule applies to the size a card is
// sold with, not to what NVML reports (a T4 got 3 pods).
func TestDefaultMaxPodsMiB(t *testing.T) {
	for _, tt := range []struct {
		card string
		mib  int64
		want int
	}{
		{"Tesla T4 (16 GB, ECC on)", 15109, 4},
		{"Tesla V100-SXM2-32GB", 32510, 8},
		{"Tesla V100-SXM2-16GB", 16160, 4},
		{"NVIDIA A10G (24 GB)", 22731, 6},
		{"NVIDIA A10 (24 GB)", 23028, 6},
		{"NVIDIA A100-SXM4-40GB, ECC on", 40536, 10},
		{"NVIDIA A100-SXM4-80GB", 81920, 20},
		{"NVIDIA H100 80GB HBM3", 81559, 20},
		{"NVIDIA H200 (141 GB)", 143771, 35},
		{"NVIDIA L40S (48 GB)", 46068, 12},
		{"GeForce GTX 1080 Ti (11 GB)", 11178, 2},
		{"1 GiB", 1024, 1},
		// Sizes far from any listed one are rounded to the nearest GiB.
		{"13.5 GiB, unlisted", 13824, 3},
		{"28 GiB, unlisted", 28672, 7},
	} {
		if got := DefaultMaxPodsMiB(tt.mib); got != tt.want {
			t.Errorf("%s: DefaultMaxPodsMiB(%d) = %d, want %d", tt.card, tt.mib, got, tt.want)
		}
	}
}

func TestTakeCountsPodsOnce(t *testing.T) {
	c := card()
	c.Take(general, 2, 10, true)
	c.Take(general, 3, 20, false) // second container of the same pod
	c.Take(online, 0, 0, false)   // no-op for counts
	want := card()
	want.UsedMemoryGiB, want.UsedCores, want.General = 5, 30, 1
	if c != want {
		t.Errorf("after takes: got %+v, want %+v", c, want)
	}
	if c.Pods() != 1 || c.FreeMemoryGiB() != 27 || c.Empty() {
		t.Errorf("Pods=%d Free=%d Empty=%v, want 1, 27, false", c.Pods(), c.FreeMemoryGiB(), c.Empty())
	}
}
