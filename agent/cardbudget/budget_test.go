package cardbudget

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// cards are a 16 GB T4 as NVML reports it (14 GiB) and an 80 GiB A100.
var cards = []protocol.Card{
	{Index: 0, UUID: "GPU-0", Model: "Tesla T4", MemoryMiB: 15109, Healthy: true},
	{Index: 1, UUID: "GPU-1", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Healthy: true},
}

func use(holder string, class protocol.Class, index int, mem, cores int64) Use {
	return Use{Holder: holder, Class: class, Index: index, UUID: cards[index].UUID, MemoryGiB: mem, Cores: cores}
}

// TestTake: every card rule, counted over what is held and over the
// uses of one Take; the refusal names the card, the numbers and the
// holders.
func TestTake(t *testing.T) {
	g, on, off := protocol.ClassGeneral, protocol.ClassOnline, protocol.ClassOffline
	cases := []struct {
		name string
		held []Use
		take []Use
		want string // "": taken
	}{
		{"memory fits", []Use{use("a", g, 0, 10, 50)}, []Use{use("b", g, 0, 4, 50)}, ""},
		{"memory over", []Use{use("a", g, 0, 10, 50)}, []Use{use("b", g, 0, 5, 10)},
			"memory on card 0 (GPU-0): 10 GiB already held + 5 GiB asked > the card's 14 GiB (held by a 10 GiB)"},
		{"general cores over", []Use{use("a", g, 1, 1, 60), use("c", g, 1, 1, 30)}, []Use{use("b", g, 1, 1, 20)},
			"cores on card 1 (GPU-1): 90 cores already held + 20 cores asked > the card's 100 cores (held by a 60 cores, c 30 cores)"},
		{"general cores to 100", []Use{use("a", g, 1, 1, 60)}, []Use{use("b", g, 1, 1, 40)}, ""},
		{"general cores to 101", []Use{use("a", g, 1, 1, 60)}, []Use{use("b", g, 1, 1, 41)}, "60 cores already held + 41 cores asked > the card's 100 cores"},
		{"offline greedy cores to 100", []Use{use("a", off, 1, 1, 80)}, []Use{use("b", off, 1, 1, 20)}, ""},
		{"offline greedy cores to 101", []Use{use("a", off, 1, 1, 80)}, []Use{use("b", off, 1, 1, 21)}, "greedy cores on card 1 (GPU-1): 80 cores already held + 21 cores asked"},
		{"offline greedy over", []Use{use("a", off, 1, 1, 80)}, []Use{use("b", off, 1, 1, 30)},
			"greedy cores on card 1 (GPU-1): 80 cores already held + 30 cores asked > the card's 100 cores (held by a 80 cores)"},
		{"online holds no cores", []Use{use("a", off, 1, 1, 100)}, []Use{use("b", on, 1, 1, 0)}, ""},
		{"general beside online", []Use{use("a", on, 1, 1, 0)}, []Use{use("b", g, 1, 1, 10)},
			"card 1 (GPU-1): a general slice never shares a card with online or offline ones (held by a online)"},
		{"general beside offline", []Use{use("a", off, 1, 1, 10)}, []Use{use("b", g, 1, 1, 0)}, "held by a offline"},
		{"online beside general", []Use{use("a", g, 1, 1, 10), use("a", g, 1, 0, 0)}, []Use{use("b", on, 1, 1, 0)},
			"an online slice never shares a card with general ones (held by a general)"},
		{"offline beside general", []Use{use("a", g, 1, 1, 10)}, []Use{use("b", off, 1, 1, 10)}, "an offline slice never shares"},
		{"classes on another card", []Use{use("a", g, 0, 1, 10)}, []Use{use("b", on, 1, 1, 0)}, ""},
		{"over by the uses of one take", nil, []Use{use("b", g, 0, 8, 50), use("b", g, 0, 8, 50)},
			"8 GiB already held + 8 GiB asked > the card's 14 GiB (held by b 8 GiB)"},
		{"a card the node lacks", nil, []Use{{Holder: "b", Class: g, Index: 7, UUID: "GPU-forged", MemoryGiB: 1}},
			"the slice names card 7 (GPU-forged), which this node does not have"},
		{"cores judged by cores alone (memory over already)", []Use{use("a", g, 0, 14, 0), use("c", g, 0, 14, 0)}, []Use{use("b", g, 0, 0, 10)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := New(cards)
			b.Hold(tc.held...)
			err := b.Take(tc.take...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Take: %v, want it taken", err)
			case tc.want != "" && (!errors.Is(err, ErrOverCapacity) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Take: %v, want ErrOverCapacity saying %q", err, tc.want)
			}
		})
	}
}

// TestTakeHolds: what Take took is held by the next Take.
func TestTakeHolds(t *testing.T) {
	b := New(cards)
	if err := b.Take(use("a", protocol.ClassGeneral, 0, 10, 50)); err != nil {
		t.Fatal(err)
	}
	if err := b.Take(use("b", protocol.ClassGeneral, 0, 10, 10)); !errors.Is(err, ErrOverCapacity) {
		t.Fatalf("second Take: %v, want ErrOverCapacity", err)
	}
}

// TestGrantUses: a memory grant holds memory, a core grant of its class
// cores, every grant its class.
func TestGrantUses(t *testing.T) {
	s := []protocol.Slice{{Index: 1, UUID: "GPU-1", MemoryGiB: 4, Cores: 30}}
	grant := func(resource string, class protocol.Class) store.Grant {
		return store.Grant{Namespace: "ns", Name: "p", Container: "c", Resource: resource, Class: class, Slices: s}
	}
	u := func(class protocol.Class, mem, cores int64) []Use {
		return []Use{{Holder: "ns/p/c", Class: class, Index: 1, UUID: "GPU-1", MemoryGiB: mem, Cores: cores}}
	}
	for _, tc := range []struct {
		g    store.Grant
		want []Use
	}{
		{grant(protocol.ResourceMemory, protocol.ClassGeneral), u(protocol.ClassGeneral, 4, 0)},
		{grant(protocol.ResourceCore, protocol.ClassGeneral), u(protocol.ClassGeneral, 0, 30)},
		{grant(protocol.ResourceCoreGreedy, protocol.ClassOffline), u(protocol.ClassOffline, 0, 30)},
		{grant(protocol.ResourceCore, protocol.ClassOffline), u(protocol.ClassOffline, 0, 0)},
		{grant(protocol.ResourceMemory, protocol.ClassOnline), u(protocol.ClassOnline, 4, 0)},
	} {
		if diff := cmp.Diff(tc.want, GrantUses(tc.g)); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", tc.g.Resource, tc.g.Class, diff)
		}
	}
	if got := SliceUse("claim ns/c", protocol.ClassOnline, s[0]); got.Cores != 0 || got.MemoryGiB != 4 {
		t.Errorf("online slice use %+v: want its memory, no cores", got)
	}
	if got := SliceUse("claim ns/c", protocol.ClassOffline, s[0]); got.Cores != 30 || got.MemoryGiB != 4 {
		t.Errorf("offline slice use %+v: want its memory and cores", got)
	}
}

func TestLivePods(t *testing.T) {
	pod := func(uid string, phase v1.PodPhase) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: k8stypes.UID("u" + uid)}, Status: v1.PodStatus{Phase: phase}}
	}
	got := LivePods([]*v1.Pod{pod("1", v1.PodRunning), pod("2", v1.PodPending), pod("3", v1.PodSucceeded), pod("4", v1.PodFailed)})
	if diff := cmp.Diff(map[string]bool{"u1": true, "u2": true}, got); diff != "" {
		t.Errorf("live (-want +got):\n%s", diff)
	}
}
