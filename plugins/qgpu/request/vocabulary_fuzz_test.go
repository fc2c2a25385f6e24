package request

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

// vocabResources are the names the fuzzer sets, by index.
var vocabResources = []string{vcore, vmem, t9gpu, t9pct, t9node, hgpu, hmem, hmemPct, hcores, mem, core}

// FuzzParseVocabulary sets up to three resources of any vocabulary (native
// included) on each of two containers, and checks what every accepted
// request promises once resolved against a node: the native bounds, and
// never less memory than asked.
func FuzzParseVocabulary(f *testing.F) {
	f.Add(uint8(0), "20", uint8(1), "1000", uint8(0), "", uint8(0), "20", uint8(1), "2000", uint8(0), "", "", uint8(1), false)
	f.Add(uint8(3), "30", uint8(11), "", uint8(11), "", uint8(2), "1", uint8(11), "", uint8(11), "", "", uint8(0), false)
	f.Add(uint8(5), "2", uint8(6), "1500", uint8(8), "20", uint8(5), "1", uint8(7), "50", uint8(11), "", "", uint8(0), true)
	f.Add(uint8(4), "1", uint8(11), "", uint8(11), "", uint8(11), "", uint8(11), "", uint8(11), "", "", uint8(0), false)
	f.Add(uint8(0), "50", uint8(1), "7", uint8(2), "1", uint8(0), "200", uint8(11), "", uint8(11), "", "70", uint8(255), false)
	f.Fuzz(func(t *testing.T, r1 uint8, q1 string, r2 uint8, q2 string, r3 uint8, q3 string,
		r4 uint8, q4 string, r5 uint8, q5 string, r6 uint8, q6 string, limit string, unit uint8, hamiCluster bool) {
		a, ok1 := fuzzVocabContainer("a", []uint8{r1, r2, r3}, []string{q1, q2, q3})
		b, ok2 := fuzzVocabContainer("b", []uint8{r4, r5, r6}, []string{q4, q5, q6})
		if !ok1 || !ok2 {
			return
		}
		pod := makePod("p", "", a, b)
		if limit != "" {
			pod.Annotations[vocab.AnnotationVCUDACoreLimit] = limit
		}
		opts := Options{VCUDAMemoryUnitMiB: int64(unit), HAMiWholeGPU: hamiCluster}
		req, err := ParseWith(pod, opts)
		if err != nil {
			if req != nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseWith = %+v, %v: want nil and an error wrapping ErrInvalid", req, err)
			}
			return
		}
		if req == nil {
			return
		}
		for _, card := range []struct {
			memGiB int64
			cards  int
		}{{15, 1}, {79, 8}} {
			resolved, err := req.Resolve(card.memGiB, card.cards)
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("Resolve: %v does not wrap ErrInvalid", err)
				}
				continue
			}
			checkRequest(t, resolved)
			checkNeverLess(t, pod, resolved, opts, card.memGiB)
		}
	})
}

func fuzzVocabContainer(name string, idx []uint8, qs []string) (v1.Container, bool) {
	c := v1.Container{Name: name, Resources: v1.ResourceRequirements{Limits: v1.ResourceList{}}}
	for i, r := range idx {
		if int(r) >= len(vocabResources) || qs[i] == "" {
			continue
		}
		q, err := resource.ParseQuantity(qs[i])
		if err != nil {
			return c, false
		}
		c.Resources.Limits[v1.ResourceName(vocabResources[r])] = q
	}
	return c, true
}

// checkNeverLess asserts that every translated container holds at least the
// memory its spec asked for, in MiB or in percent of a card.
func checkNeverLess(t *testing.T, pod *v1.Pod, req *Request, opts Options, cardGiB int64) {
	t.Helper()
	if req.Vocabulary == vocab.Native {
		return
	}
	for _, c := range req.Containers {
		spec := specContainer(pod, c.Name)
		perCardMiB := c.PerCardMemoryGiB() * 1024
		if v, ok := spec.Resources.Limits[vmem]; ok {
			unit := max(opts.VCUDAMemoryUnitMiB, 1)
			if c.MemoryGiB*1024 < v.Value()*unit {
				t.Fatalf("container %s: %d GiB granted for %s %s (unit %d MiB)", c.Name, c.MemoryGiB, vmem, v.String(), unit)
			}
		}
		if v, ok := spec.Resources.Limits[hmem]; ok && perCardMiB < v.Value() {
			t.Fatalf("container %s: %d MiB per card granted for %s %s", c.Name, perCardMiB, hmem, v.String())
		}
		for _, pct := range []v1.ResourceName{t9pct, hmemPct} {
			if v, ok := spec.Resources.Limits[pct]; ok && perCardMiB*100 < v.Value()*cardGiB*1024 {
				t.Fatalf("container %s: %d MiB per card granted for %s %s of a %d GiB card", c.Name, perCardMiB, pct, v.String(), cardGiB)
			}
		}
	}
}

func specContainer(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return &v1.Container{}
}
