package sim

import (
	"strings"
	"testing"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
)

func TestClassesValidate(t *testing.T) {
	for _, tt := range []struct {
		name    string
		c       Classes
		wantErr string
	}{
		{"none", Classes{}, ""},
		{"both", Classes{MixedPct: 20, SharedPct: 30}, ""},
		{"mixed nodes only", Classes{MixedPct: 20}, ""},
		{"negative", Classes{MixedPct: -1}, "mixed-nodes -1"},
		{"above 100", Classes{MixedPct: 10, SharedPct: 101}, "class-pods 101"},
		{"class pods without mixed nodes", Classes{SharedPct: 10}, "mixed-nodes 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// Only pods taking part of one card change class, about SharedPct of them,
// online and offline alike; the nodes marked mixed are about MixedPct.
func TestClassesShares(t *testing.T) {
	nodes, pods := load(t)
	c := Classes{MixedPct: 25, SharedPct: 40}
	counts := map[protocol.Class]int{}
	shared := 0
	for i := range pods {
		class := c.class(&pods[i])
		counts[class]++
		if pods[i].NumGPU == 1 && pods[i].GPUMilli < 1000 {
			shared++
		} else if class != protocol.ClassGeneral {
			t.Fatalf("pod %+v: class %s, want general (not a share of one card)", pods[i], class)
		}
	}
	online, offline := counts[protocol.ClassOnline], counts[protocol.ClassOffline]
	if got := float64(online+offline) / float64(shared); got < 0.3 || got > 0.5 {
		t.Errorf("%d online and %d offline of %d sharing pods: want about 40%%", online, offline, shared)
	}
	if online == 0 || offline == 0 {
		t.Errorf("%d online, %d offline: want both", online, offline)
	}
	mixed := 0
	for _, m := range c.mixedNodes(nodes) {
		if m {
			mixed++
		}
	}
	if mixed == 0 || mixed == len(nodes) {
		t.Errorf("%d of %d nodes mixed, want about a quarter", mixed, len(nodes))
	}
}

// General pods that keep off mixed nodes leave online and offline pods
// more room than general pods that treat them alike, for every policy, and
// allocate no less of the cluster overall.
func TestClassesKeepOffMixedNodes(t *testing.T) {
	nodes, pods := load(t)
	for _, policy := range placement.Policies {
		t.Run(string(policy), func(t *testing.T) {
			var failed [2]int
			for i, alike := range []bool{false, true} {
				for seed := int64(42); seed < 45; seed++ {
					r := Run(Config{Nodes: nodes, Pods: pods, Mode: QGPU, Policy: policy, Seed: seed, MaxArrivalPct: 130,
						Classes: Classes{MixedPct: 25, SharedPct: 30, MixedAlike: alike}})
					failed[i] += r.ClassFailed
				}
			}
			if failed[0] >= failed[1] {
				t.Errorf("online and offline pods failed: %d keeping off mixed nodes, %d treating them alike: want fewer", failed[0], failed[1])
			}
		})
	}
}
