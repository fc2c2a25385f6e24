package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	qnvml "github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

const smiList = `GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5b3f0d6e-1111-2222-3333-444455556666)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaaaaaa-1111-2222-3333-444455556666)
  MIG 1g.5gb      Device  0: (UUID: MIG-bbbbbbbb-1111-2222-3333-444455556666)
`

func TestParseSMI(t *testing.T) {
	cards, err := parseSMIList(smiList)
	if err != nil {
		t.Fatal(err)
	}
	if err := addSMIMemory(cards, "0, GPU-5b3f0d6e-1111-2222-3333-444455556666, 81559\n1, GPU-aaaaaaaa-1111-2222-3333-444455556666, 40960\n"); err != nil {
		t.Fatal(err)
	}
	want := []smiCard{
		{Index: 0, UUID: "GPU-5b3f0d6e-1111-2222-3333-444455556666", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
		{Index: 1, UUID: "GPU-aaaaaaaa-1111-2222-3333-444455556666", Name: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960},
	}
	if diff := cmp.Diff(want, cards); diff != "" {
		t.Errorf("cards (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", "No devices were found\n", "GPU 0: no uuid here\n"} {
		if _, err := parseSMIList(bad); err == nil {
			t.Errorf("parseSMIList(%q) accepted", bad)
		}
	}
	if err := addSMIMemory(cards, "0, GPU-x, lots\n"); err == nil {
		t.Error("a memory that is not a number was accepted")
	}
}

func TestCompareInventory(t *testing.T) {
	h100 := protocol.Card{Index: 0, UUID: "GPU-a", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true}
	smi := smiCard{Index: 0, UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}
	for _, tc := range []struct {
		name    string
		cards   []protocol.Card
		skipped []qnvml.SkippedCard
		smi     []smiCard
		want    string // a problem's text, "" for none
	}{
		{"same", []protocol.Card{h100}, nil, []smiCard{smi}, ""},
		{"memory within 1 %", []protocol.Card{func() protocol.Card { c := h100; c.MemoryMiB = 81000; return c }()}, nil, []smiCard{smi}, ""},
		{"memory off", []protocol.Card{func() protocol.Card { c := h100; c.MemoryMiB = 40000; return c }()}, nil, []smiCard{smi}, "40000 MiB"},
		{"memory unknown", []protocol.Card{h100}, nil, []smiCard{func() smiCard { s := smi; s.MemoryMiB = -1; return s }()}, ""},
		{"missing", nil, nil, []smiCard{smi}, "not among the agent's cards"},
		{"left out for MIG", nil, []qnvml.SkippedCard{{Index: 0, UUID: "GPU-a", Reason: "MIG"}}, []smiCard{smi}, ""},
		{"extra", []protocol.Card{h100}, nil, nil, "not in nvidia-smi's list"},
		{"other index", []protocol.Card{func() protocol.Card { c := h100; c.Index = 3; return c }()}, nil, []smiCard{smi}, "index 3"},
		{"other model", []protocol.Card{func() protocol.Card { c := h100; c.Model = "H100"; return c }()}, nil, []smiCard{smi}, `model "H100"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(compareInventory(tc.cards, tc.skipped, tc.smi), "; ")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("problems %q, want %q", got, tc.want)
			}
		})
	}
}
