package request

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

const (
	mem    = protocol.ResourceMemory
	core   = protocol.ResourceCore
	greedy = protocol.ResourceCoreGreedy
)

// res is a container's resources as name → quantity string.
type res map[string]string

func list(r res) v1.ResourceList {
	if r == nil {
		return nil
	}
	out := v1.ResourceList{}
	for k, v := range r {
		out[v1.ResourceName(k)] = resource.MustParse(v)
	}
	return out
}

// ctr is a container whose requests equal its limits (as the API server
// defaults an extended resource's request from its limit).
func ctr(name string, r res) v1.Container {
	return v1.Container{Name: name, Resources: v1.ResourceRequirements{Limits: list(r), Requests: list(r)}}
}

// ctrRL is a container with separate requests and limits (either may be nil).
func ctrRL(name string, requests, limits res) v1.Container {
	return v1.Container{Name: name, Resources: v1.ResourceRequirements{Limits: list(limits), Requests: list(requests)}}
}

// makePod builds a pod; class "" leaves the app-class annotation out.
func makePod(name, class string, containers ...v1.Container) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{}},
		Spec:       v1.PodSpec{SchedulerName: protocol.SchedulerName, Containers: containers},
	}
	if class != "" {
		p.Annotations[protocol.AnnotationAppClass] = class
	}
	return p
}

func withAnnotation(p *v1.Pod, k, v string) *v1.Pod {
	p.Annotations[k] = v
	return p
}

func withInit(p *v1.Pod, c v1.Container) *v1.Pod {
	p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	return p
}

func one(name string, memGiB, cores int64) Container {
	return Container{Name: name, MemoryGiB: memGiB, Cores: cores, Cards: 1}
}

func TestParseSeedExamples(t *testing.T) {
	tests := []struct {
		name string
		pod  *v1.Pod
		want *Request
	}{{
		// Tencent qGPU co-location docs, offline tab: requests only, app-class offline.
		name: "seed000 offline",
		pod:  makePod("offline", "offline", ctrRL("offline-container", res{greedy: "50", mem: "4"}, nil)),
		want: &Request{Class: protocol.ClassOffline, Containers: []Container{one("offline-container", 4, 50)}},
	}, {
		name: "seed000 offline greedy 100 shares its card",
		pod:  makePod("offline", "offline", ctrRL("offline-container", res{greedy: "100", mem: "4"}, nil)),
		want: &Request{Class: protocol.ClassOffline, Containers: []Container{one("offline-container", 4, 100)}},
	}, {
		name: "seed000 online",
		pod:  makePod("online", "online", ctrRL("online-container", res{mem: "8"}, nil)),
		want: &Request{Class: protocol.ClassOnline, Containers: []Container{one("online-container", 8, 0)}},
	}, {
		name: "seed000 general",
		pod:  makePod("common", "", ctrRL("common-container", res{core: "30", mem: "5"}, nil)),
		want: &Request{Class: protocol.ClassGeneral, Containers: []Container{one("common-container", 5, 30)}},
	}, {
		// Tencent qGPU on TKE: requests and limits both set, equal.
		name: "seed001 requests and limits",
		pod:  makePod("qgpu", "", ctr("c", res{mem: "5", core: "30"})),
		want: &Request{Class: protocol.ClassGeneral, Containers: []Container{one("c", 5, 30)}},
	}, {
		// Tencent qGPU on TKE: requests may be omitted; they default to the limits.
		name: "seed001 limits only",
		pod:  makePod("qgpu", "", ctrRL("c", nil, res{mem: "5", core: "30"})),
		want: &Request{Class: protocol.ClassGeneral, Containers: []Container{one("c", 5, 30)}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.pod)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name string
		pod  *v1.Pod
		want *Request
	}{{
		name: "no qGPU resources",
		pod:  makePod("p", "", ctr("c", res{"cpu": "1", "memory": "1Gi"})),
		want: nil,
	}, {
		name: "no containers",
		pod:  makePod("p", ""),
		want: nil,
	}, {
		name: "no qGPU resources, bad app-class is not our business",
		pod:  makePod("p", "batch", ctr("c", res{"cpu": "1"})),
		want: nil,
	}, {
		name: "no qGPU resources, nvidia.com/gpu is not our business",
		pod:  makePod("p", "", ctr("c", res{"nvidia.com/gpu": "1"})),
		want: nil,
	}, {
		name: "C=99",
		pod:  makePod("p", "", ctr("c", res{mem: "1", core: "99"})),
		want: &Request{Class: protocol.ClassGeneral, Containers: []Container{one("c", 1, 99)}},
	}, {
		name: "C=100 one whole card",
		pod:  makePod("p", "", ctr("c", res{mem: "24", core: "100"})),
		want: &Request{Class: protocol.ClassGeneral, Containers: []Container{{Name: "c", MemoryGiB: 24, Cores: 100, Cards: 1, Whole: true}}},
	}, {
		name: "C=200 two whole cards",
		pod:  makePod("p", "", ctr("c", res{mem: "48", core: "200"})),
		want: &Request{Class: protocol.ClassGeneral, Containers: []Container{{Name: "c", MemoryGiB: 48, Cores: 200, Cards: 2, Whole: true}}},
	}, {
		name: "C=300 three whole cards",
		pod:  makePod("p", "", ctr("c", res{mem: "30", core: "300"})),
		want: &Request{Class: protocol.ClassGeneral, Containers: []Container{{Name: "c", MemoryGiB: 30, Cores: 300, Cards: 3, Whole: true}}},
	}, {
		name: "whole numbers written as decimals",
		pod:  makePod("p", "", ctr("c", res{mem: "100e-2", core: "1.0"})),
		want: &Request{Class: protocol.ClassGeneral, Containers: []Container{one("c", 1, 1)}},
	}, {
		name: "whole numbers written with suffixes",
		pod:  makePod("p", "", ctr("c", res{mem: "1k", core: "1e3"})),
		want: &Request{Class: protocol.ClassGeneral, Containers: []Container{{Name: "c", MemoryGiB: 1000, Cores: 1000, Cards: 10, Whole: true}}},
	}, {
		name: "max memory",
		pod:  makePod("p", "online", ctr("c", res{mem: "16384"})),
		want: &Request{Class: protocol.ClassOnline, Containers: []Container{one("c", MaxMemoryGiB, 0)}},
	}, {
		name: "multi-container general",
		pod: makePod("p", "",
			ctr("a", res{mem: "2", core: "20"}),
			ctr("sidecar", res{"cpu": "100m"}),
			ctr("b", res{mem: "4", core: "200"})),
		want: &Request{Class: protocol.ClassGeneral, Containers: []Container{
			one("a", 2, 20),
			{Name: "b", MemoryGiB: 4, Cores: 200, Cards: 2, Whole: true},
		}},
	}, {
		name: "multi-container offline, greedy total 100",
		pod: makePod("p", "offline",
			ctr("a", res{mem: "2", greedy: "60"}),
			ctr("b", res{mem: "2", greedy: "40"})),
		want: &Request{Class: protocol.ClassOffline, Containers: []Container{one("a", 2, 60), one("b", 2, 40)}},
	}, {
		name: "multi-container online",
		pod: makePod("p", "online",
			ctr("a", res{mem: "2"}),
			ctr("b", res{mem: "6"})),
		want: &Request{Class: protocol.ClassOnline, Containers: []Container{one("a", 2, 0), one("b", 6, 0)}},
	}, {
		name: "use-gputype lower-cased and trimmed, empties dropped",
		pod: withAnnotation(withAnnotation(makePod("p", "", ctr("c", res{mem: "1", core: "10"})),
			protocol.AnnotationUseGPUType, " A100 , ,V100-SXM2,"), protocol.AnnotationNoUseGPUType, "T4"),
		want: &Request{Class: protocol.ClassGeneral, Containers: []Container{one("c", 1, 10)},
			UseTypes: []string{"a100", "v100-sxm2"}, NoUseTypes: []string{"t4"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.pod)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name string
		pod  *v1.Pod
		// wantIn are substrings the message must hold: the field and the value.
		wantIn []string
	}{
		{"negative memory", makePod("p", "", ctr("c", res{mem: "-1", core: "10"})), []string{"containers[c]", mem, "-1"}},
		{"zero memory", makePod("p", "", ctr("c", res{mem: "0", core: "10"})), []string{mem, "value 0"}},
		{"fractional memory", makePod("p", "", ctr("c", res{mem: "1.5", core: "10"})), []string{mem, "1500m", "whole number"}},
		{"fractional memory that Value rounds up", makePod("p", "", ctr("c", res{mem: "0.999999999", core: "10"})), []string{mem, "whole number"}},
		{"milli memory", makePod("p", "", ctr("c", res{mem: "1999999999n", core: "10"})), []string{mem, "whole number"}},
		{"huge memory", makePod("p", "", ctr("c", res{mem: "16385", core: "10"})), []string{mem, "16385"}},
		{"huge memory in Pi", makePod("p", "", ctr("c", res{mem: "1Pi", core: "10"})), []string{mem, "1125899906842624", "between 1 and 16384"}},
		{"memory in Ei", makePod("p", "", ctr("c", res{mem: "1Ei", core: "10"})), []string{mem, "1152921504606846976"}},
		// ParseQuantity saturates 8Ei to MaxInt64.
		{"memory 8Ei", makePod("p", "", ctr("c", res{mem: "8Ei", core: "10"})), []string{mem, "9223372036854775807", "between 1 and 16384"}},
		{"memory below int64", makePod("p", "", ctr("c", res{mem: "-1e19", core: "10"})), []string{mem, "-10e18", "out of range"}},
		{"memory beyond int64", makePod("p", "", ctr("c", res{mem: "1e19", core: "10"})), []string{mem, "10e18", "out of range"}},
		{"memory beyond int64 online", makePod("p", "online", ctr("c", res{mem: "1e30"})), []string{mem, "1e30", "out of range"}},
		{"C=0", makePod("p", "", ctr("c", res{mem: "1", core: "0"})), []string{core, "value 0"}},
		{"C=-5", makePod("p", "", ctr("c", res{mem: "1", core: "-5"})), []string{core, "-5"}},
		{"C=150", makePod("p", "", ctr("c", res{mem: "2", core: "150"})), []string{core, "150"}},
		{"C=250", makePod("p", "", ctr("c", res{mem: "2", core: "250"})), []string{core, "250"}},
		{"C=6500 more than MaxCards", makePod("p", "", ctr("c", res{mem: "65", core: "6500"})), []string{core, "6500"}},
		{"C fractional", makePod("p", "", ctr("c", res{mem: "1", core: "10.5"})), []string{core, "10500m"}},
		{"C beyond int64", makePod("p", "", ctr("c", res{mem: "1", core: "1e19"})), []string{core, "10e18"}},
		{"C=300 memory not divisible by 3", makePod("p", "", ctr("c", res{mem: "10", core: "300"})), []string{mem, "10", "3 whole cards"}},
		{"C=200 memory 3", makePod("p", "", ctr("c", res{mem: "3", core: "200"})), []string{mem, "3", "2 whole cards"}},
		{"quantity 2k cores", makePod("p", "", ctr("c", res{mem: "1e1", core: "2k"})), []string{mem, "10", "20 whole cards"}},
		{"online with qgpu-core", makePod("p", "online", ctr("c", res{mem: "1", core: "10"})), []string{core, "10", "online"}},
		{"online with qgpu-core 0", makePod("p", "online", ctr("c", res{mem: "1", core: "0"})), []string{core, "value 0", "online"}},
		{"online with qgpu-core beyond int64", makePod("p", "online", ctr("c", res{mem: "1", core: "1e19"})), []string{core, "10e18"}},
		{"online with core-greedy", makePod("p", "online", ctr("c", res{mem: "1", greedy: "10"})), []string{greedy, "10", "online"}},
		{"offline with qgpu-core", makePod("p", "offline", ctr("c", res{mem: "1", core: "10", greedy: "10"})), []string{core, "10", "offline"}},
		{"offline greedy 0", makePod("p", "offline", ctr("c", res{mem: "1", greedy: "0"})), []string{greedy, "value 0"}},
		{"offline greedy missing", makePod("p", "offline", ctr("c", res{mem: "1"})), []string{greedy, "value 0"}},
		{"offline greedy 101", makePod("p", "offline", ctr("c", res{mem: "1", greedy: "101"})), []string{greedy, "101"}},
		{"offline greedy total over containers", makePod("p", "offline",
			ctr("a", res{mem: "1", greedy: "60"}), ctr("b", res{mem: "1", greedy: "41"})), []string{greedy, "total 101"}},
		{"online memory total over containers", makePod("p", "online",
			ctr("a", res{mem: "16000"}), ctr("b", res{mem: "1000"})), []string{mem, "total 17000"}},
		{"unknown app-class", makePod("p", "batch", ctr("c", res{mem: "1", core: "10"})), []string{protocol.AnnotationAppClass, `"batch"`}},
		{"app-class case matters", makePod("p", "Online", ctr("c", res{mem: "1"})), []string{protocol.AnnotationAppClass, `"Online"`}},
		{"empty app-class", withAnnotation(makePod("p", "", ctr("c", res{mem: "1", core: "10"})), protocol.AnnotationAppClass, ""), []string{protocol.AnnotationAppClass, `""`}},
		{"general with core-greedy", makePod("p", "", ctr("c", res{mem: "1", core: "10", greedy: "10"})), []string{greedy, "10", "offline"}},
		{"general with core-greedy 0", makePod("p", "", ctr("c", res{mem: "1", core: "10", greedy: "0"})), []string{greedy, "value 0"}},
		{"core without memory", makePod("p", "", ctr("c", res{core: "10"})), []string{mem, "missing"}},
		{"greedy without memory", makePod("p", "offline", ctr("c", res{greedy: "10"})), []string{mem, "missing"}},
		{"nvidia.com/gpu in the same container", makePod("p", "", ctr("c", res{mem: "1", core: "10", "nvidia.com/gpu": "1"})), []string{"containers[c]", "nvidia.com/gpu"}},
		{"nvidia.com/gpu in another container", makePod("p", "",
			ctr("a", res{mem: "1", core: "10"}), ctr("b", res{"nvidia.com/gpu": "1"})), []string{"containers[b]", "nvidia.com/gpu"}},
		{"nvidia.com/gpu requested only", makePod("p", "",
			ctr("a", res{mem: "1", core: "10"}), ctrRL("b", res{"nvidia.com/gpu": "1"}, nil)), []string{"containers[b]", "nvidia.com/gpu"}},
		{"qGPU in init container", withInit(makePod("p", "", ctr("c", res{mem: "1", core: "10"})),
			ctr("init", res{mem: "1"})), []string{"initContainers[init]", mem}},
		{"qGPU only in init container", withInit(makePod("p", ""), ctr("init", res{core: "10"})), []string{"initContainers[init]", core}},
		{"requests != limits", makePod("p", "", ctrRL("c", res{mem: "2", core: "10"}, res{mem: "3", core: "10"})), []string{mem, "request 2", "limit 3"}},
		{"requests != limits for cores", makePod("p", "", ctrRL("c", res{mem: "2", core: "20"}, res{mem: "2", core: "10"})), []string{core, "request 20", "limit 10"}},
		{"use-gputype empty", withAnnotation(makePod("p", "", ctr("c", res{mem: "1", core: "10"})), protocol.AnnotationUseGPUType, ""), []string{protocol.AnnotationUseGPUType, `""`}},
		{"nouse-gputype only commas", withAnnotation(makePod("p", "", ctr("c", res{mem: "1", core: "10"})), protocol.AnnotationNoUseGPUType, " , ,"), []string{protocol.AnnotationNoUseGPUType, `" , ,"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.pod)
			if err == nil {
				t.Fatalf("Parse = %+v, want an error", got)
			}
			if got != nil {
				t.Errorf("Parse returned %+v with the error", got)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			for _, s := range tt.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}

func TestMatchesModel(t *testing.T) {
	tests := []struct {
		name       string
		use, nouse string // annotations; "-" leaves one out
		model      string
		want       bool
	}{
		{"no filters", "-", "-", "Tesla T4", true},
		{"use substring", "a100", "-", "NVIDIA A100-SXM4-40GB", true},
		{"use case-insensitive", "A100", "-", "nvidia a100-sxm4-40gb", true},
		{"use other model", "V100", "-", "NVIDIA A100-SXM4-40GB", false},
		{"use list second matches", "V100, a100", "-", "NVIDIA A100-SXM4-40GB", true},
		{"use with spaces", "  tesla t4 ", "-", "Tesla T4", true},
		{"nouse matches", "-", "t4", "Tesla T4", false},
		{"nouse other", "-", "t4", "Tesla V100", true},
		{"nouse wins over use", "tesla", "T4", "Tesla T4", false},
		{"use and nouse, use matches", "tesla", "T4", "Tesla V100", true},
		{"non-ASCII model", "ä100", "-", "NVIDIA Ä100", true},
		{"non-ASCII model no match", "a100", "-", "NVIDIA Ä100", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := makePod("p", "", ctr("c", res{mem: "1", core: "10"}))
			if tt.use != "-" {
				withAnnotation(pod, protocol.AnnotationUseGPUType, tt.use)
			}
			if tt.nouse != "-" {
				withAnnotation(pod, protocol.AnnotationNoUseGPUType, tt.nouse)
			}
			req, err := Parse(pod)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := req.MatchesModel(tt.model); got != tt.want {
				t.Errorf("MatchesModel(%q) = %v, want %v", tt.model, got, tt.want)
			}
		})
	}
}

func TestMatchesModelAllocatesNothing(t *testing.T) {
	req := &Request{UseTypes: []string{"v100", "a100"}, NoUseTypes: []string{"t4"}}
	allocs := testing.AllocsPerRun(100, func() {
		if !req.MatchesModel("NVIDIA A100-SXM4-80GB") {
			t.Fatal("no match")
		}
	})
	if allocs != 0 {
		t.Errorf("MatchesModel allocates %v times per call, want 0", allocs)
	}
}

func TestContainerPerCard(t *testing.T) {
	tests := []struct {
		name              string
		c                 Container
		wantMem, wantCore int64
	}{
		{"shared", one("c", 5, 30), 5, 30},
		{"offline 100", one("c", 4, 100), 4, 100},
		{"three whole cards", Container{Name: "c", MemoryGiB: 48, Cores: 300, Cards: 3, Whole: true}, 16, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := []int64{tt.c.PerCardMemoryGiB(), tt.c.PerCardCores()}
			if diff := cmp.Diff([]int64{tt.wantMem, tt.wantCore}, got); diff != "" {
				t.Errorf("per card (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSharesOneCard(t *testing.T) {
	for _, tt := range []struct {
		class protocol.Class
		want  bool
	}{{protocol.ClassGeneral, false}, {protocol.ClassOnline, true}, {protocol.ClassOffline, true}} {
		t.Run(string(tt.class), func(t *testing.T) {
			if got := (&Request{Class: tt.class}).SharesOneCard(); got != tt.want {
				t.Errorf("SharesOneCard = %v, want %v", got, tt.want)
			}
		})
	}
}

// Asks sees any qGPU resource, in requests or limits, in any container.
func TestAsks(t *testing.T) {
	tests := []struct {
		name string
		pod  *v1.Pod
		want bool
	}{
		{"none", makePod("p", "", ctr("c", res{"cpu": "1"})), false},
		{"whole gpu only", makePod("p", "", ctr("c", res{"nvidia.com/gpu": "1"})), false},
		{"memory", makePod("p", "", ctr("a", nil), ctr("b", res{mem: "4"})), true},
		{"greedy in limits only", makePod("p", "offline", ctrRL("c", nil, res{greedy: "20"})), true},
		{"core in requests only", makePod("p", "", ctrRL("c", res{core: "20"}, nil)), true},
		{"init container (invalid, still counted)", withInit(makePod("p", "", ctr("c", nil)), ctr("i", res{mem: "1"})), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Asks(tt.pod); got != tt.want {
				t.Errorf("Asks = %v, want %v", got, tt.want)
			}
		})
	}
}
