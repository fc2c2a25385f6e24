package allocate

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

// vocabPod is a general pod whose containers ask in a vocabulary: spec[i]
// is container i's resources, slices[i] its assignment.
func vocabPod(name string, age int, spec []map[string]int64, slices [][]protocol.Slice) *v1.Pod {
	pod := general(name, age, 1, 1, 0)
	pod.Spec.Containers = nil
	a := &protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(pod.UID), Node: testNode, Class: protocol.ClassGeneral}
	for i, res := range spec {
		limits := v1.ResourceList{}
		for k, v := range res {
			limits[v1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
		}
		cname := "c" + string(rune('1'+i))
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: cname, Resources: v1.ResourceRequirements{Limits: limits}})
		a.Containers = append(a.Containers, protocol.ContainerAssignment{Name: cname, Slices: slices[i]})
	}
	setAssignment(pod, a)
	return pod
}

// One call per container of a vocabulary pod carries its whole slice; the
// pod's grant is complete after the last container's call, and it says what
// the assignment says.
func TestAllocatorVocabularies(t *testing.T) {
	tests := []struct {
		name     string
		pod      *v1.Pod
		calls    []string // resource per container, in order
		ids      []int
		wantEnvs []map[string]string
	}{{
		name: "vcuda README: two containers, 20 cores each",
		pod: vocabPod("vcuda", 0, []map[string]int64{
			{vocab.VCUDACore: 20, vocab.VCUDAMemory: 1000}, {vocab.VCUDACore: 20, vocab.VCUDAMemory: 2000}},
			[][]protocol.Slice{{slice(0, 1, 20)}, {slice(0, 2, 20)}}),
		calls: []string{vocab.VCUDACore, vocab.VCUDACore}, ids: []int{20, 20},
		wantEnvs: []map[string]string{
			{"NVIDIA_VISIBLE_DEVICES": "GPU-0", "QGPU_MEMORY_GIB": "1", "QGPU_CORES": "20"},
			{"NVIDIA_VISIBLE_DEVICES": "GPU-0", "QGPU_MEMORY_GIB": "2", "QGPU_CORES": "20"}},
	}, {
		name: "t9k percent",
		pod: vocabPod("t9k", 0, []map[string]int64{{vocab.T9kGPUPercent: 30}},
			[][]protocol.Slice{{slice(1, 5, 30)}}),
		calls: []string{vocab.T9kGPUPercent}, ids: []int{30},
		wantEnvs: []map[string]string{{"NVIDIA_VISIBLE_DEVICES": "GPU-1", "T9K_GPU_PERCENT": "30", "T9K_GPU_MEMORY": "5120", "QGPU_CORES": "30"}},
	}, {
		name: "t9k whole cards",
		pod: vocabPod("t9k", 0, []map[string]int64{{vocab.T9kGPU: 2}},
			[][]protocol.Slice{{slice(0, 15, 100), slice(1, 15, 100)}}),
		calls: []string{vocab.T9kGPU}, ids: []int{2},
		wantEnvs: []map[string]string{{"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1", "T9K_GPU_PERCENT": "", "QGPU_CORES": "200"}},
	}, {
		name: "t9k node-exclusive",
		pod: vocabPod("t9k", 0, []map[string]int64{{vocab.T9kGPUNode: 1}},
			[][]protocol.Slice{{slice(0, 15, 100), slice(1, 15, 100)}}),
		calls: []string{vocab.T9kGPUNode}, ids: []int{1},
		wantEnvs: []map[string]string{{"NVIDIA_VISIBLE_DEVICES": "all", "QGPU_CORES": "200"}},
	}, {
		name: "hami one card",
		pod: vocabPod("hami", 0, []map[string]int64{{vocab.HAMiGPU: 1, vocab.HAMiMemory: 3000, vocab.HAMiCores: 30}},
			[][]protocol.Slice{{slice(1, 3, 30)}}),
		calls: []string{vocab.HAMiGPU}, ids: []int{1},
		wantEnvs: []map[string]string{{"NVIDIA_VISIBLE_DEVICES": "GPU-1", "QGPU_MEMORY_GIB": "3", "QGPU_CORES": "30"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			a, granted := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{tt.pod}})
			for i, r := range tt.calls {
				if len(*granted) != 0 {
					t.Fatalf("grant written before call %d", i)
				}
				resp, err := a.Allocate(ctx, r, ids(r, tt.ids[i]))
				if err != nil {
					t.Fatalf("call %d (%s): %v", i, r, err)
				}
				for k, v := range tt.wantEnvs[i] {
					if resp.Envs[k] != v {
						t.Errorf("call %d: %s = %q, want %q (envs %v)", i, k, resp.Envs[k], v, resp.Envs)
					}
				}
			}
			if len(*granted) != 1 {
				t.Fatalf("OnPodGranted called %d times, want 1", len(*granted))
			}
			want, _ := AssignmentOf(tt.pod, testNode)
			if diff := cmp.Diff(want, (*granted)[0]); diff != "" {
				t.Errorf("grant (-want +got):\n%s", diff)
			}
		})
	}
}

// A native call never lands on a vocabulary container and the reverse,
// even with equal amounts; a vocabulary call for another amount is refused.
func TestAllocatorKeepsVocabulariesApart(t *testing.T) {
	ctx := context.Background()
	native := general("native", 0, 5, 30, 0)
	t9k := vocabPod("t9k", 1, []map[string]int64{{vocab.T9kGPUPercent: 30}}, [][]protocol.Slice{{slice(1, 5, 30)}})
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{native, t9k}})
	resp, err := a.Allocate(ctx, vocab.T9kGPUPercent, ids("p", 30))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Envs["NVIDIA_VISIBLE_DEVICES"] != "GPU-1" {
		t.Fatalf("the older native pod's card was handed to the T9k call: %v", resp.Envs)
	}
	if resp, err = a.Allocate(ctx, protocol.ResourceCore, ids("c", 30)); err != nil || resp.Envs["QGPU_CORES"] != "30" {
		t.Fatalf("native core call: %v %v", resp, err)
	}
	_, err = a.Allocate(ctx, vocab.T9kGPUPercent, ids("q", 40))
	if err == nil || !strings.Contains(err.Error(), "exactly 40") {
		t.Fatalf("a call for 40 percent with no such container: %v", err)
	}
}

// The kubelet repeating a vocabulary call (a container it already
// allocated) gets the same answer from the store.
func TestAllocatorRepeatedVocabularyCall(t *testing.T) {
	ctx := context.Background()
	pod := vocabPod("hami", 0, []map[string]int64{{vocab.HAMiGPU: 1, vocab.HAMiMemoryPercent: 20}}, [][]protocol.Slice{{slice(0, 3, 1)}})
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{pod}})
	first, err := a.Allocate(ctx, vocab.HAMiGPU, ids("h", 1))
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.Allocate(ctx, vocab.HAMiGPU, ids("h", 1))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first.Envs, again.Envs); diff != "" {
		t.Errorf("repeated answer differs (-first +again):\n%s", diff)
	}
}

// cdiBackend answers each request as CDI delivery does: a device name per
// answer, no variables (they are in the spec).
type cdiBackend struct{}

func (cdiBackend) Name() string { return "cdi" }

func (cdiBackend) Allocate(r enforce.Request) (*pluginapi.ContainerAllocateResponse, error) {
	return &pluginapi.ContainerAllocateResponse{CdiDevices: []*pluginapi.CDIDevice{{Name: "qgpu.io/container=" + r.Container + "-" + r.Resource}}}, nil
}

// A vocabulary call is answered with the memory and the core answers
// together; under CDI delivery each is a device name, and the core's (its
// compute cap) was dropped: the container ran uncapped.
func TestVocabularyAnswerCarriesBothCDIDevices(t *testing.T) {
	pod := vocabPod("hami", 0, []map[string]int64{{vocab.HAMiGPU: 1, vocab.HAMiMemory: 3000, vocab.HAMiCores: 30}},
		[][]protocol.Slice{{slice(1, 3, 30)}})
	a, _ := newAllocator(t, filepath.Join(t.TempDir(), "meta.db"), &fakePods{cached: []*v1.Pod{pod}})
	a.Config = func() (enforce.Backend, protocol.Policy, error) { return cdiBackend{}, protocol.PolicyFixedShare, nil }
	resp, err := a.Allocate(context.Background(), vocab.HAMiGPU, ids(vocab.HAMiGPU, 1))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range resp.CdiDevices {
		got = append(got, d.Name)
	}
	want := []string{"qgpu.io/container=c1-" + protocol.ResourceMemory, "qgpu.io/container=c1-" + protocol.ResourceCore}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CDI devices (-want +got):\n%s", diff)
	}
}
