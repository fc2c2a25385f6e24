package placement

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

const (
	general = protocol.ClassGeneral
	online  = protocol.ClassOnline
	offline = protocol.ClassOffline
)

// cards returns n empty healthy cards of gib GiB with the default pod limit.
func cards(n int, gib int64) []ledger.Card {
	out := make([]ledger.Card, n)
	for i := range out {
		out[i] = ledger.Card{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: "Tesla V100-SXM2-32GB",
			MemoryGiB: gib, Healthy: true, MaxPods: ledger.DefaultMaxPods(gib)}
	}
	return out
}

// with adds one pod's slice to card i and returns cs.
func with(cs []ledger.Card, i int, class protocol.Class, mem, cores int64) []ledger.Card {
	cs[i].Take(class, mem, cores, true)
	return cs
}

func model(cs []ledger.Card, i int, m string) []ledger.Card {
	cs[i].Model = m
	return cs
}

func shared(name string, mem, cores int64) request.Container {
	return request.Container{Name: name, MemoryGiB: mem, Cores: cores, Cards: 1}
}

func whole(name string, mem int64, k int) request.Container {
	return request.Container{Name: name, MemoryGiB: mem, Cores: 100 * int64(k), Cards: k, Whole: true}
}

func req(class protocol.Class, cs ...request.Container) *request.Request {
	return &request.Request{Class: class, Containers: cs}
}

func use(r *request.Request, use, nouse []string) *request.Request {
	r.UseTypes, r.NoUseTypes = use, nouse
	return r
}

// chosen lists the card index each container got (several for whole cards).
func chosen(choices []Choice) [][2]int {
	var out [][2]int
	for _, c := range choices {
		out = append(out, [2]int{c.Container, c.Card})
	}
	return out
}

func TestPlace(t *testing.T) {
	tests := []struct {
		name       string
		cards      []ledger.Card
		mixed      bool
		req        *request.Request
		policy     Policy
		want       [][2]int // {container, card}
		wantReason string
	}{
		// General pods: card policy.
		{name: "binpack picks the fuller card",
			cards: with(cards(3, 32), 1, general, 16, 50), req: req(general, shared("c", 4, 20)), policy: Binpack,
			want: [][2]int{{0, 1}}},
		{name: "binpack picks the fuller card, other order",
			cards: with(with(cards(3, 32), 2, general, 16, 50), 0, general, 2, 10), req: req(general, shared("c", 4, 20)), policy: Binpack,
			want: [][2]int{{0, 2}}},
		{name: "spread picks the emptier card",
			cards: with(with(cards(3, 32), 0, general, 16, 50), 1, general, 2, 10), req: req(general, shared("c", 4, 20)), policy: Spread,
			want: [][2]int{{0, 2}}},
		{name: "spread among used cards",
			cards: with(with(cards(2, 32), 0, general, 16, 50), 1, general, 2, 10), req: req(general, shared("c", 4, 20)), policy: Spread,
			want: [][2]int{{0, 1}}},
		{name: "binpack skips a card that does not fit",
			cards: with(cards(2, 32), 1, general, 30, 50), req: req(general, shared("c", 4, 20)), policy: Binpack,
			want: [][2]int{{0, 0}}},
		{name: "binpack two containers share the fuller card",
			cards: with(cards(2, 32), 1, general, 8, 40), req: req(general, shared("a", 4, 20), shared("b", 4, 20)), policy: Binpack,
			want: [][2]int{{0, 1}, {1, 1}}},
		{name: "spread two containers on two cards",
			cards: cards(2, 32), req: req(general, shared("a", 4, 20), shared("b", 4, 20)), policy: Spread,
			want: [][2]int{{0, 0}, {1, 1}}},
		{name: "containers of one pod count as one pod for maxPods",
			cards: maxPods(with(cards(1, 32), 0, general, 1, 1), 2), req: req(general, shared("a", 1, 10), shared("b", 1, 10), shared("c", 1, 10)), policy: Binpack,
			want: [][2]int{{0, 0}, {1, 0}, {2, 0}}},
		{name: "maxPods full",
			cards: maxPods(with(with(cards(1, 32), 0, general, 1, 1), 0, general, 1, 1), 2), req: req(general, shared("a", 1, 10)), policy: Binpack,
			wantReason: ReasonCardsFull},
		{name: "containers over cores of one card spill to the next",
			cards: cards(2, 32), req: req(general, shared("a", 1, 60), shared("b", 1, 60)), policy: Binpack,
			want: [][2]int{{0, 0}, {1, 1}}},
		{name: "general on a mixed node",
			cards: cards(1, 32), mixed: true, req: req(general, shared("c", 1, 10)), policy: Binpack,
			want: [][2]int{{0, 0}}},
		{name: "general skips online and offline cards",
			cards: with(with(cards(3, 32), 0, online, 1, 0), 1, offline, 1, 10), mixed: true, req: req(general, shared("c", 1, 10)), policy: Binpack,
			want: [][2]int{{0, 2}}},
		{name: "unhealthy card skipped",
			cards: unhealthy(with(cards(2, 32), 0, general, 8, 10), 0), req: req(general, shared("c", 1, 10)), policy: Binpack,
			want: [][2]int{{0, 1}}},

		// Whole cards.
		{name: "whole card takes an empty card",
			cards: with(cards(2, 32), 0, general, 1, 1), req: req(general, whole("c", 24, 1)), policy: Binpack,
			want: [][2]int{{0, 1}}},
		{name: "whole cards take k empty cards",
			cards: with(cards(4, 32), 1, general, 1, 1), req: req(general, whole("c", 48, 2)), policy: Binpack,
			want: [][2]int{{0, 0}, {0, 2}}},
		{name: "whole card never on an online card",
			cards: with(cards(2, 32), 0, online, 1, 0), mixed: true, req: req(general, whole("c", 8, 1)), policy: Spread,
			want: [][2]int{{0, 1}}},
		{name: "two whole containers take distinct cards",
			cards: cards(3, 32), req: req(general, whole("a", 8, 1), whole("b", 16, 2)), policy: Binpack,
			want: [][2]int{{0, 0}, {1, 1}, {1, 2}}},
		{name: "shared container after whole one avoids its card",
			cards: cards(2, 32), req: req(general, whole("a", 8, 1), shared("b", 1, 10)), policy: Binpack,
			want: [][2]int{{0, 0}, {1, 1}}},
		{name: "not enough empty cards",
			cards: with(cards(3, 32), 1, general, 1, 1), req: req(general, whole("c", 48, 3)), policy: Binpack,
			wantReason: ReasonWholeCards},
		{name: "whole card memory per card over capacity",
			cards: cards(2, 32), req: req(general, whole("c", 66, 2)), policy: Binpack,
			wantReason: ReasonWholeCards},
		{name: "whole card on an unhealthy empty card",
			cards: unhealthy(cards(1, 32), 0), req: req(general, whole("c", 8, 1)), policy: Binpack,
			wantReason: ReasonWholeCards},

		// Online: prefer cards without offline pods, then spread.
		{name: "online prefers the empty card",
			cards: with(with(cards(3, 32), 0, offline, 1, 50), 1, online, 8, 0), mixed: true, req: req(online, shared("c", 4, 0)),
			want: [][2]int{{0, 2}}},
		{name: "online prefers a card without offline pods over more free memory",
			cards: with(with(cards(2, 32), 0, offline, 1, 50), 1, online, 16, 0), mixed: true, req: req(online, shared("c", 4, 0)),
			want: [][2]int{{0, 1}}},
		{name: "online spreads among cards without offline pods",
			cards: with(with(cards(2, 32), 0, online, 16, 0), 1, online, 8, 0), mixed: true, req: req(online, shared("c", 4, 0)),
			want: [][2]int{{0, 1}}},
		{name: "online beside offline when nothing else fits",
			cards: with(with(cards(2, 32), 0, offline, 8, 100), 1, online, 30, 0), mixed: true, req: req(online, shared("c", 4, 0)),
			want: [][2]int{{0, 0}}},
		{name: "online containers share one card",
			cards: cards(2, 32), mixed: true, req: req(online, shared("a", 4, 0), shared("b", 8, 0)),
			want: [][2]int{{0, 0}, {1, 0}}},
		{name: "online containers' total must fit one card",
			cards: cards(2, 32), mixed: true, req: req(online, shared("a", 20, 0), shared("b", 20, 0)),
			wantReason: ReasonCardsFull},

		// Offline: prefer cards without online pods, then bin-pack.
		{name: "offline prefers cards without online pods, then the fuller",
			cards: with(with(cards(3, 32), 0, online, 1, 0), 1, offline, 8, 30), mixed: true, req: req(offline, shared("c", 4, 50)),
			want: [][2]int{{0, 1}}},
		{name: "offline bin-packs onto the fuller empty-of-online card",
			cards: with(with(cards(3, 32), 0, offline, 1, 10), 2, offline, 16, 10), mixed: true, req: req(offline, shared("c", 4, 50)),
			want: [][2]int{{0, 2}}},
		{name: "offline beside online when nothing else fits",
			cards: with(with(cards(2, 32), 0, online, 8, 0), 1, offline, 8, 100), mixed: true, req: req(offline, shared("c", 4, 50)),
			want: [][2]int{{0, 0}}},
		{name: "offline greedy over 100 on every card",
			cards: with(cards(1, 32), 0, offline, 8, 60), mixed: true, req: req(offline, shared("c", 4, 50)),
			wantReason: ReasonCardsFull},
		{name: "offline containers share one card, greedy summed",
			cards: with(cards(2, 32), 0, offline, 1, 50), mixed: true, req: req(offline, shared("a", 1, 30), shared("b", 1, 30)),
			want: [][2]int{{0, 1}, {1, 1}}},

		// The mixed label.
		{name: "online needs mixed", cards: cards(1, 32), req: req(online, shared("c", 1, 0)), wantReason: ReasonNotMixed},
		{name: "offline needs mixed", cards: cards(1, 32), req: req(offline, shared("c", 1, 1)), wantReason: ReasonNotMixed},

		// Models.
		{name: "use-gputype restricts cards",
			cards: model(cards(2, 32), 1, "Tesla T4"), req: use(req(general, shared("c", 1, 10)), []string{"t4"}, nil), policy: Spread,
			want: [][2]int{{0, 1}}},
		{name: "nouse-gputype excludes cards",
			cards: model(with(cards(2, 32), 1, general, 8, 10), 1, "Tesla T4"), req: use(req(general, shared("c", 1, 10)), nil, []string{"t4"}), policy: Binpack,
			want: [][2]int{{0, 0}}},
		{name: "use-gputype for whole cards",
			cards: model(cards(3, 32), 0, "Tesla T4"), req: use(req(general, whole("c", 16, 2)), []string{"v100"}, nil),
			want: [][2]int{{0, 1}, {0, 2}}},
		{name: "use-gputype for online",
			cards: model(cards(2, 32), 0, "Tesla T4"), mixed: true, req: use(req(online, shared("c", 1, 0)), []string{"t4"}, nil),
			want: [][2]int{{0, 0}}},
		{name: "no card of the model", cards: cards(2, 32), req: use(req(general, shared("c", 1, 10)), []string{"a100"}, nil),
			wantReason: ReasonNoModel},
		{name: "model card full, other model free",
			cards: model(with(cards(2, 32), 0, general, 32, 10), 0, "Tesla T4"), req: use(req(general, shared("c", 1, 10)), []string{"t4"}, nil),
			wantReason: ReasonCardsFull},

		// Reasons.
		{name: "no cards", cards: nil, req: req(general, shared("c", 1, 10)), wantReason: ReasonNoCards},
		{name: "memory full", cards: with(cards(1, 32), 0, general, 30, 10), req: req(general, shared("c", 4, 10)), wantReason: ReasonCardsFull},
		{name: "cores full", cards: with(cards(1, 32), 0, general, 1, 95), req: req(general, shared("c", 1, 10)), wantReason: ReasonCardsFull},
		{name: "general on online cards",
			cards: with(cards(2, 32), 0, online, 1, 0), mixed: true, req: req(general, shared("c", 1, 10)),
			want: [][2]int{{0, 1}}},
		{name: "general where all cards are online/offline",
			cards: with(with(cards(2, 32), 0, online, 1, 0), 1, offline, 1, 10), mixed: true, req: req(general, shared("c", 1, 10)),
			wantReason: ReasonClassOnCard},
		{name: "online where all cards are general",
			cards: with(with(cards(2, 32), 0, general, 1, 10), 1, general, 1, 10), mixed: true, req: req(online, shared("c", 1, 0)),
			wantReason: ReasonClassOnCard},
		{name: "offline where all cards are whole-card general",
			cards: with(cards(1, 32), 0, general, 8, 100), mixed: true, req: req(offline, shared("c", 1, 10)),
			wantReason: ReasonClassOnCard},
		{name: "second container does not fit: nothing placed",
			cards: cards(1, 32), req: req(general, shared("a", 16, 10), shared("b", 17, 10)), policy: Binpack,
			wantReason: ReasonCardsFull},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sentinel := Choice{Container: -1, Card: -1}
			out := append(make([]Choice, 0, 8), sentinel)
			got, reason := Place(tt.cards, tt.mixed, tt.req, tt.policy, out)
			if reason != tt.wantReason {
				t.Fatalf("reason = %q, want %q (choices %v)", reason, tt.wantReason, got)
			}
			if len(got) == 0 || got[0] != sentinel {
				t.Fatalf("Place dropped what out held: %v", got)
			}
			if diff := cmp.Diff(tt.want, chosen(got[1:])); diff != "" {
				t.Errorf("choices (-want +got):\n%s", diff)
			}
		})
	}
}

func maxPods(cs []ledger.Card, n int) []ledger.Card {
	for i := range cs {
		cs[i].MaxPods = n
	}
	return cs
}

func unhealthy(cs []ledger.Card, i int) []ledger.Card {
	cs[i].Healthy = false
	return cs
}

// TestPlaceTakesOnScratch: Place adds the pod to the cards it is given, so a
// caller that scores the result sees the node after the pod.
func TestPlaceTakesOnScratch(t *testing.T) {
	cs := cards(3, 32)
	r := req(general, shared("a", 4, 20), shared("b", 2, 10), whole("c", 32, 2))
	got, reason := Place(cs, false, r, Binpack, nil)
	if reason != "" {
		t.Fatal(reason)
	}
	want := cards(3, 32)
	want[0].Take(general, 4, 20, true)
	want[0].Take(general, 2, 10, false)
	want[1].Take(general, 16, 100, true)
	want[2].Take(general, 16, 100, true)
	if diff := cmp.Diff(want, cs); diff != "" {
		t.Errorf("cards after Place (-want +got):\n%s", diff)
	}
	wantSlices := []protocol.ContainerAssignment{
		{Name: "a", Slices: []protocol.Slice{{Index: 0, UUID: "GPU-0", MemoryGiB: 4, Cores: 20}}},
		{Name: "b", Slices: []protocol.Slice{{Index: 0, UUID: "GPU-0", MemoryGiB: 2, Cores: 10}}},
		{Name: "c", Slices: []protocol.Slice{{Index: 1, UUID: "GPU-1", MemoryGiB: 16, Cores: 100}, {Index: 2, UUID: "GPU-2", MemoryGiB: 16, Cores: 100}}},
	}
	if diff := cmp.Diff(wantSlices, Slices(cs, r, got)); diff != "" {
		t.Errorf("Slices (-want +got):\n%s", diff)
	}
}

func TestSlices(t *testing.T) {
	cs := cards(4, 32)
	cs[3].Index, cs[3].UUID = 7, "GPU-7" // card positions are not indexes
	tests := []struct {
		name    string
		req     *request.Request
		choices []Choice
		want    []protocol.ContainerAssignment
	}{{
		name:    "offline",
		req:     req(offline, shared("a", 4, 60), shared("b", 2, 40)),
		choices: []Choice{{0, 3}, {1, 3}},
		want: []protocol.ContainerAssignment{
			{Name: "a", Slices: []protocol.Slice{{Index: 7, UUID: "GPU-7", MemoryGiB: 4, Cores: 60}}},
			{Name: "b", Slices: []protocol.Slice{{Index: 7, UUID: "GPU-7", MemoryGiB: 2, Cores: 40}}},
		},
	}, {
		name:    "online",
		req:     req(online, shared("a", 4, 0)),
		choices: []Choice{{0, 1}},
		want:    []protocol.ContainerAssignment{{Name: "a", Slices: []protocol.Slice{{Index: 1, UUID: "GPU-1", MemoryGiB: 4}}}},
	}, {
		name:    "three whole cards",
		req:     req(general, whole("a", 48, 3)),
		choices: []Choice{{0, 0}, {0, 2}, {0, 3}},
		want: []protocol.ContainerAssignment{{Name: "a", Slices: []protocol.Slice{
			{Index: 0, UUID: "GPU-0", MemoryGiB: 16, Cores: 100},
			{Index: 2, UUID: "GPU-2", MemoryGiB: 16, Cores: 100},
			{Index: 7, UUID: "GPU-7", MemoryGiB: 16, Cores: 100},
		}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Slices(cs, tt.req, tt.choices)); diff != "" {
				t.Errorf("Slices (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlaceAllocatesNothing(t *testing.T) {
	base := with(with(with(cards(8, 32), 1, general, 8, 30), 2, online, 4, 0), 3, offline, 4, 30)
	base = model(base, 5, "Tesla T4")
	tests := []struct {
		name   string
		mixed  bool
		req    *request.Request
		policy Policy
	}{
		{"general binpack", false, req(general, shared("a", 4, 20), shared("b", 4, 20)), Binpack},
		{"general spread", false, req(general, shared("a", 4, 20)), Spread},
		{"whole cards", false, req(general, whole("a", 32, 2)), Binpack},
		{"online", true, req(online, shared("a", 4, 0)), Binpack},
		{"offline", true, req(offline, shared("a", 4, 50)), Binpack},
		{"model filters", false, use(req(general, shared("a", 4, 20)), []string{"v100", "a100"}, []string{"t4"}), Binpack},
		{"failure", false, req(general, shared("a", 40, 20)), Binpack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scratch := make([]ledger.Card, len(base))
			out := make([]Choice, 0, 16)
			allocs := testing.AllocsPerRun(200, func() {
				copy(scratch, base)
				Place(scratch, tt.mixed, tt.req, tt.policy, out[:0])
			})
			if allocs != 0 {
				t.Errorf("Place allocates %v times per call, want 0", allocs)
			}
		})
	}
}

// placeScore places on a copy and scores, as the plugin's Score does.
func placeScore(t *testing.T, cs []ledger.Card, mixed bool, r *request.Request, cardPolicy, nodePolicy Policy) int64 {
	t.Helper()
	cs = append([]ledger.Card(nil), cs...)
	choices, reason := Place(cs, mixed, r, cardPolicy, nil)
	if reason != "" {
		t.Fatalf("Place: %s", reason)
	}
	s := NodeScore(cs, r, nodePolicy, choices)
	if s < 0 || s > MaxScore {
		t.Fatalf("NodeScore = %d, out of [0, %d]", s, MaxScore)
	}
	return s
}

func TestNodeScore(t *testing.T) {
	emptyNode := cards(2, 32)
	fullerNode := with(with(cards(2, 32), 0, general, 16, 50), 1, general, 8, 20)
	tests := []struct {
		name   string
		a, b   []ledger.Card // want score(a) > score(b)
		mixed  bool
		req    *request.Request
		policy Policy
		aWins  bool
	}{
		{"binpack prefers the fuller node", fullerNode, emptyNode, false, req(general, shared("c", 4, 20)), Binpack, true},
		{"spread prefers the emptier node", fullerNode, emptyNode, false, req(general, shared("c", 4, 20)), Spread, false},
		{"binpack counts cores", with(cards(1, 32), 0, general, 1, 90), with(cards(1, 32), 0, general, 1, 10), false, req(general, shared("c", 1, 5)), Binpack, true},
		{"binpack counts memory", with(cards(1, 32), 0, general, 20, 10), with(cards(1, 32), 0, general, 2, 10), false, req(general, shared("c", 1, 5)), Binpack, true},
		{"online prefers a node where its card has no offline pod",
			with(cards(1, 32), 0, online, 16, 0), with(cards(1, 32), 0, offline, 1, 10), true, req(online, shared("c", 4, 0)), Binpack, true},
		{"online spreads between equal nodes",
			with(cards(1, 32), 0, online, 2, 0), with(cards(1, 32), 0, online, 16, 0), true, req(online, shared("c", 4, 0)), Binpack, true},
		{"offline prefers a node where its card has no online pod",
			with(cards(1, 32), 0, offline, 1, 10), with(cards(1, 32), 0, online, 16, 0), true, req(offline, shared("c", 4, 10)), Spread, true},
		{"offline bin-packs between equal nodes",
			with(cards(1, 32), 0, offline, 16, 10), with(cards(1, 32), 0, offline, 2, 10), true, req(offline, shared("c", 4, 10)), Spread, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sa := placeScore(t, tt.a, tt.mixed, tt.req, Binpack, tt.policy)
			sb := placeScore(t, tt.b, tt.mixed, tt.req, Binpack, tt.policy)
			if (sa > sb) != tt.aWins || sa == sb {
				t.Errorf("scores a=%d b=%d, want a wins = %v", sa, sb, tt.aWins)
			}
		})
	}
}

func TestNodeScoreNoHealthyCards(t *testing.T) {
	cs := unhealthy(cards(1, 32), 0)
	if s := NodeScore(cs, req(general, shared("c", 1, 1)), Binpack, nil); s != 0 {
		t.Errorf("NodeScore = %d, want 0", s)
	}
}

// Normalize ranks the nodes of the preferred tier (general pods on nodes
// that are not mixed) above the others, and stretches only that tier.
func TestNormalizeTiers(t *testing.T) {
	for _, tt := range []struct {
		name   string
		policy Policy
		raw    []int64
		want   []int64
	}{
		{"binpack, one mixed node", Binpack, []int64{Preferred + 10, Preferred + 50, 80}, []int64{0, 100, 0}},
		{"fragfit, one mixed node", FragFit, []int64{Preferred + 10, Preferred + 50, 80}, []int64{0, 100, 0}},
		{"only mixed nodes", Binpack, []int64{10, 50}, []int64{0, 100}},
		{"fragfit, negative raw scores", FragFit, []int64{Preferred - 3000, Preferred - 2990, -5}, []int64{0, 100, 0}},
		{"all preferred", Spread, []int64{Preferred + 20, Preferred + 20}, []int64{100, 100}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := append([]int64(nil), tt.raw...)
			Normalize(tt.policy, got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Normalize(%v) = %v, want %v", tt.raw, got, tt.want)
			}
		})
	}
}
