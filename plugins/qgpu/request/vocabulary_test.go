package request

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

const (
	vcore   = vocab.VCUDACore
	vmem    = vocab.VCUDAMemory
	t9gpu   = vocab.T9kGPU
	t9pct   = vocab.T9kGPUPercent
	t9node  = vocab.T9kGPUNode
	hgpu    = vocab.HAMiGPU
	hmem    = vocab.HAMiMemory
	hmemPct = vocab.HAMiMemoryPercent
	hcores  = vocab.HAMiCores
)

func general(voc vocab.Vocabulary, cs ...Container) *Request {
	return &Request{Class: protocol.ClassGeneral, Vocabulary: voc, Containers: cs}
}

func TestParseVocabularies(t *testing.T) {
	unit256 := Options{VCUDAMemoryUnitMiB: 256}
	hamiCluster := Options{HAMiWholeGPU: true}
	tests := []struct {
		name string
		pod  *v1.Pod
		opts Options
		want *Request
	}{{
		// gpu-admission's README: two containers of 20 cores each, 1000 and 2000 of memory.
		name: "vcuda README example, MiB units",
		pod: makePod("vcuda", "",
			ctrRL("c1", nil, res{vcore: "20", vmem: "1000"}),
			ctrRL("c2", nil, res{vcore: "20", vmem: "2000"})),
		want: general(vocab.VCUDA, one("c1", 1, 20), one("c2", 2, 20)),
	}, {
		name: "vcuda 256 MiB units (tkestack gpu-manager)",
		pod:  makePod("vcuda", "", ctr("c", res{vcore: "50", vmem: "12"})),
		opts: unit256,
		want: general(vocab.VCUDA, one("c", 3, 50)),
	}, {
		name: "vcuda memory rounded up, never down",
		pod:  makePod("vcuda", "", ctr("c", res{vcore: "10", vmem: "1025"})),
		want: general(vocab.VCUDA, one("c", 2, 10)),
	}, {
		name: "vcuda two whole cards without memory: all of each card",
		pod:  makePod("vcuda", "", ctr("c", res{vcore: "200"})),
		want: general(vocab.VCUDA, Container{Name: "c", Cores: 200, Cards: 2, Whole: true, MemoryPercent: 100}),
	}, {
		name: "vcuda two whole cards with memory: split evenly, rounded up",
		pod:  makePod("vcuda", "", ctr("c", res{vcore: "200", vmem: "5000"})),
		want: general(vocab.VCUDA, Container{Name: "c", MemoryGiB: 6, Cores: 200, Cards: 2, Whole: true}),
	}, {
		name: "vcuda core limit",
		pod: withAnnotation(makePod("vcuda", "", ctr("c", res{vcore: "20", vmem: "1024"})),
			vocab.AnnotationVCUDACoreLimit, "60"),
		want: &Request{Class: protocol.ClassGeneral, Vocabulary: vocab.VCUDA, CoreLimit: 60, Containers: []Container{one("c", 1, 20)}},
	}, {
		name: "vcuda with use-gputype",
		pod: withAnnotation(makePod("vcuda", "", ctr("c", res{vcore: "20", vmem: "1024"})),
			protocol.AnnotationUseGPUType, "T4"),
		want: &Request{Class: protocol.ClassGeneral, Vocabulary: vocab.VCUDA, UseTypes: []string{"t4"}, Containers: []Container{one("c", 1, 20)}},
	}, {
		name: "t9k whole cards",
		pod:  makePod("t9k", "", ctr("c", res{t9gpu: "2"})),
		want: general(vocab.T9k, Container{Name: "c", Cores: 200, Cards: 2, Whole: true, MemoryPercent: 100}),
	}, {
		name: "t9k percent",
		pod:  makePod("t9k", "", ctr("c", res{t9pct: "30"})),
		want: general(vocab.T9k, Container{Name: "c", Cores: 30, Cards: 1, MemoryPercent: 30}),
	}, {
		name: "t9k percent 100 is a whole card",
		pod:  makePod("t9k", "", ctr("c", res{t9pct: "100"})),
		want: general(vocab.T9k, Container{Name: "c", Cores: 100, Cards: 1, Whole: true, MemoryPercent: 100}),
	}, {
		name: "t9k node-exclusive",
		pod:  makePod("t9k", "", ctr("c", res{t9node: "1"}), ctr("sidecar", res{"cpu": "1"})),
		want: &Request{Class: protocol.ClassGeneral, Vocabulary: vocab.T9k, NodeExclusive: true,
			Containers: []Container{{Name: "c", Whole: true, AllCards: true, MemoryPercent: 100}}},
	}, {
		name: "hami memory MiB and cores",
		pod:  makePod("hami", "", ctr("c", res{hgpu: "1", hmem: "3000", hcores: "30"})),
		want: general(vocab.HAMi, one("c", 3, 30)),
	}, {
		name: "hami memory percentage",
		pod:  makePod("hami", "", ctr("c", res{hgpu: "1", hmemPct: "25", hcores: "25"})),
		want: general(vocab.HAMi, Container{Name: "c", Cores: 25, Cards: 1, MemoryPercent: 25}),
	}, {
		name: "hami defaults: the card's memory, no core reservation (1 share)",
		pod:  makePod("hami", "", ctr("c", res{hgpu: "1", hcores: "0"})),
		want: general(vocab.HAMi, Container{Name: "c", Cores: 1, Cards: 1, MemoryPercent: 100}),
	}, {
		name: "hami gpucores 100 is a whole card",
		pod:  makePod("hami", "", ctr("c", res{hgpu: "1", hmem: "2048", hcores: "100"})),
		want: general(vocab.HAMi, Container{Name: "c", MemoryGiB: 2, Cores: 100, Cards: 1, Whole: true}),
	}, {
		name: "hami two cards are two whole cards, gpumem per card",
		pod:  makePod("hami", "", ctr("c", res{hgpu: "2", hmem: "1500", hcores: "20"})),
		want: general(vocab.HAMi, Container{Name: "c", MemoryGiB: 4, Cores: 200, Cards: 2, Whole: true}),
	}, {
		name: "nvidia.com/gpu alone: not ours unless HAMi is enabled cluster-wide",
		pod:  makePod("gpu", "", ctr("c", res{hgpu: "1"})),
		want: nil,
	}, {
		name: "nvidia.com/gpu alone with HAMi cluster-wide: a card's memory",
		pod:  makePod("gpu", "", ctr("c", res{hgpu: "1"})),
		opts: hamiCluster,
		want: general(vocab.HAMi, Container{Name: "c", Cores: 1, Cards: 1, MemoryPercent: 100}),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseWith(tt.pod, tt.opts)
			if err != nil {
				t.Fatalf("ParseWith: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseWith (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseVocabulariesRejects(t *testing.T) {
	tests := []struct {
		name string
		pod  *v1.Pod
		want string
	}{
		{"vcuda memory without core", makePod("p", "", ctr("c", res{vmem: "1000"})), "nvidia.com/vcuda-core: missing"},
		{"vcuda shared without memory", makePod("p", "", ctr("c", res{vcore: "20"})), "nvidia.com/vcuda-memory: missing"},
		{"vcuda core 150", makePod("p", "", ctr("c", res{vcore: "150", vmem: "1"})), "nvidia.com/vcuda-core: value 150"},
		{"vcuda core 0", makePod("p", "", ctr("c", res{vcore: "0", vmem: "1"})), "nvidia.com/vcuda-core: value 0"},
		{"vcuda memory 0", makePod("p", "", ctr("c", res{vcore: "10", vmem: "0"})), "nvidia.com/vcuda-memory: value 0"},
		{"vcuda core limit under the guarantee", withAnnotation(makePod("p", "", ctr("c", res{vcore: "50", vmem: "1"})),
			vocab.AnnotationVCUDACoreLimit, "40"), "value 40 is below containers[c]'s nvidia.com/vcuda-core 50"},
		{"vcuda core limit not a number", withAnnotation(makePod("p", "", ctr("c", res{vcore: "50", vmem: "1"})),
			vocab.AnnotationVCUDACoreLimit, "lots"), `nvidia.com/vcuda-core-limit: value "lots"`},
		{"vcuda fractional quantity", makePod("p", "", ctr("c", res{vcore: "0.5", vmem: "1"})), "must be a whole number"},
		{"t9k two modes", makePod("p", "", ctr("c", res{t9gpu: "1", t9pct: "50"})), "tensorstack.dev/nvidia-gpu and tensorstack.dev/nvidia-gpu-percent"},
		{"t9k percent 0", makePod("p", "", ctr("c", res{t9pct: "0"})), "nvidia-gpu-percent: value 0"},
		{"t9k percent 101", makePod("p", "", ctr("c", res{t9pct: "101"})), "nvidia-gpu-percent: value 101"},
		{"t9k node 2", makePod("p", "", ctr("c", res{t9node: "2"})), "nvidia-gpu-node: value 2 must be 1"},
		{"t9k node with another GPU container", makePod("p", "", ctr("a", res{t9node: "1"}), ctr("b", res{t9gpu: "1"})),
			"node-exclusive pod takes every card of its node for one container"},
		{"t9k gpu 0", makePod("p", "", ctr("c", res{t9gpu: "0"})), "tensorstack.dev/nvidia-gpu: value 0"},
		{"hami memory twice", makePod("p", "", ctr("c", res{hgpu: "1", hmem: "1000", hmemPct: "10"})), "nvidia.com/gpumem and nvidia.com/gpumem-percentage"},
		{"hami memory without gpu", makePod("p", "", ctr("c", res{hmem: "1000"})), "nvidia.com/gpumem: needs nvidia.com/gpu"},
		{"hami cores 101", makePod("p", "", ctr("c", res{hgpu: "1", hcores: "101"})), "nvidia.com/gpucores: value 101"},
		{"hami gpu 0", makePod("p", "", ctr("c", res{hgpu: "0", hcores: "10"})), "nvidia.com/gpu: value 0"},
		{"vcuda and t9k in one pod", makePod("p", "", ctr("a", res{vcore: "20", vmem: "1"}), ctr("b", res{t9pct: "20"})),
			"containers[a]: nvidia.com/vcuda-core and containers[b]: tensorstack.dev/nvidia-gpu-percent: a pod asks for GPUs in one vocabulary only"},
		{"native and hami in one container", makePod("p", "", ctr("a", res{mem: "1", core: "10", hcores: "10", hgpu: "1"})),
			"containers[a]: tke.cloud.tencent.com/qgpu-memory and containers[a]: nvidia.com/gpu"},
		{"vocabulary with app-class", makePod("p", "offline", ctr("c", res{t9pct: "20"})), "annotation tke.cloud.tencent.com/app-class"},
		{"vocabulary in an init container", withInit(makePod("p", "", ctr("c", res{t9pct: "20"})), ctr("init", res{t9pct: "10"})),
			"initContainers[init]: tensorstack.dev/nvidia-gpu-percent"},
		{"vocabulary request differs from limit", makePod("p", "", ctrRL("c", res{t9pct: "20"}, res{t9pct: "30"})),
			"request 20 must equal limit 30"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseWith(tt.pod, Options{})
			if !errors.Is(err, ErrInvalid) || got != nil {
				t.Fatalf("ParseWith = %+v, %v: want nil and an ErrInvalid", got, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name    string
		in      Container
		memGiB  int64
		cards   int
		want    Container
		wantErr string
	}{
		{"percent rounds up", Container{Name: "c", Cores: 30, Cards: 1, MemoryPercent: 30}, 15, 4,
			Container{Name: "c", MemoryGiB: 5, Cores: 30, Cards: 1}, ""},
		{"percent exact", Container{Name: "c", Cores: 25, Cards: 1, MemoryPercent: 25}, 16, 4,
			Container{Name: "c", MemoryGiB: 4, Cores: 25, Cards: 1}, ""},
		{"whole cards, all memory", Container{Name: "c", Cores: 200, Cards: 2, Whole: true, MemoryPercent: 100}, 79, 8,
			Container{Name: "c", MemoryGiB: 158, Cores: 200, Cards: 2, Whole: true}, ""},
		{"all cards of the node", Container{Name: "c", Whole: true, AllCards: true, MemoryPercent: 100}, 15, 3,
			Container{Name: "c", MemoryGiB: 45, Cores: 300, Cards: 3, Whole: true}, ""},
		{"absolute is left alone", one("c", 3, 10), 15, 3, one("c", 3, 10), ""},
		{"node without cards", Container{Name: "c", Whole: true, AllCards: true, MemoryPercent: 100}, 15, 0, Container{}, "the node has 0 cards"},
		{"card without memory", Container{Name: "c", Cores: 10, Cards: 1, MemoryPercent: 10}, 0, 1, Container{}, "no whole GiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := general(vocab.T9k, tt.in)
			got, err := r.Resolve(tt.memGiB, tt.cards)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Resolve: %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(general(vocab.T9k, tt.want), got); diff != "" {
				t.Errorf("Resolve (-want +got):\n%s", diff)
			}
			if got.Relative() {
				t.Errorf("resolved request is still relative: %+v", got)
			}
			if r.Containers[0] != tt.in {
				t.Errorf("Resolve changed its receiver: %+v", r.Containers[0])
			}
		})
	}
}

func TestAsksVocabularies(t *testing.T) {
	if !Asks(makePod("p", "", ctr("c", res{t9pct: "10"}))) {
		t.Error("a T9k pod does not ask")
	}
	if Asks(makePod("p", "", ctr("c", res{hgpu: "1"}))) {
		t.Error("nvidia.com/gpu alone asks")
	}
}
